"""The request function measures TTFT, ITL, E2E and tokens as vLLM defines them."""

from __future__ import annotations

import pytest

from fleetgate.bench import LoadPoint, PointOptions, Target, run_point, synthetic
from fleetgate.bench.lengths import parse_length_dist as dist
from tests.bench.upstream import Upstream, serve


def _run(up: Upstream, endpoint: str = "chat", stream_ratio: float = 1.0, **target: object):
    specs = synthetic(6, dist("fixed:20"), dist("fixed:5"), stream_ratio=stream_ratio)
    with serve(up) as url:
        t = Target(url, model="m", endpoint=endpoint, **target)  # type: ignore[arg-type]
        opts = PointOptions(target=t, pool=specs)
        return run_point(opts, LoadPoint("concurrency", 2, max_requests=6)), up


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_timing_matches_known_upstream(endpoint: str) -> None:
    res, up = _run(Upstream(first_ms=30, gap_ms=10), endpoint)
    s = res.summary
    assert s["completed"] == 6 and s["failed"] == 0
    assert 30 <= s["median_ttft_ms"] < 60  # never below the upstream's delay; slack for a busy box
    assert 10 <= s["median_itl_ms"] < 20
    # 5 tokens: TPOT = (E2E - TTFT) / 4 = the 10 ms gap
    assert 10 <= s["median_tpot_ms"] < 20
    assert s["total_output_tokens"] == 30 and s["usage_reported"] == 6
    assert s["total_input_tokens"] == 6 * 7  # the server's prompt_tokens wins
    body = up.seen[0]
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5
    assert ("messages" in body) == (endpoint == "chat")


def test_per_token_itl_differs_from_per_chunk_when_chunks_carry_several_tokens() -> None:
    res, _ = _run(Upstream(first_ms=5, gap_ms=20, tokens_per_chunk=2), continuous_usage=True)
    s = res.summary
    # chunks of 2 tokens every 20 ms: per chunk 20 ms, per token 10 ms
    assert 20 <= s["median_itl_ms"] < 40
    assert 10 <= s["median_itl_per_token_ms"] < 20
    # the chunk's gap shared by its tokens, however late the box delivered the chunk
    assert s["median_itl_per_token_ms"] < 0.75 * s["median_itl_ms"]
    rec = res.records[0]
    assert rec.chunk_tokens == [2, 1]


def test_non_streaming_and_mixed_requests() -> None:
    res, up = _run(Upstream(first_ms=0, gap_ms=5), stream_ratio=0.5)
    s = res.summary
    assert s["completed"] == 6 and s["num_streaming"] == 3
    streamed = [r for r in res.records if r.stream]
    whole = [r for r in res.records if not r.stream]
    assert all(r.ttft is not None for r in streamed)
    assert all(r.ttft is None and r.output_tokens == 5 for r in whole)
    assert sum(1 for b in up.seen if b["stream"]) == 3


def test_errors_are_counted_not_raised() -> None:
    res, _ = _run(Upstream(fail_every=3))
    s = res.summary
    assert s["failed"] == 2 and s["completed"] == 4
    assert any("HTTP 500" in e for e in s["errors"])


def test_connection_refused_is_a_failed_request() -> None:
    specs = synthetic(2, dist("fixed:4"), dist("fixed:2"))
    opts = PointOptions(target=Target("http://127.0.0.1:9/v1", model="m"), pool=specs)
    s = run_point(opts, LoadPoint("rate", 100.0, max_requests=2)).summary
    assert s["failed"] == 2 and s["completed"] == 0
