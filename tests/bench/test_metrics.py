"""Result fields follow vLLM's definitions; our additions are named apart."""

from __future__ import annotations

import pytest

from fleetgate.bench import RequestRecord, per_token_itl, summarize, windows


def _rec(i: int, ttft: float, itl: list[float], tokens: int, **kw: object) -> RequestRecord:
    r = RequestRecord(
        i,
        intended=i * 0.1,
        sent=i * 0.1 + 0.001,
        success=True,
        ttft=ttft,
        itl=itl,
        output_tokens=tokens,
        prompt_tokens=10,
        usage_reported=True,
    )
    r.latency = ttft + sum(itl)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_vllm_definitions() -> None:
    recs = [_rec(0, 0.1, [0.02, 0.02, 0.02], 4), _rec(1, 0.3, [0.04], 2)]
    s = summarize(recs, duration=2.0, goodput_slo_ms={"ttft": 200})
    assert s["completed"] == 2 and s["failed"] == 0
    assert s["request_throughput"] == 1.0
    assert s["output_throughput"] == 3.0 and s["total_token_throughput"] == 13.0
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["p99_ttft_ms"] == pytest.approx(298.0)
    # TPOT = (E2E - TTFT) / (tokens - 1): 20 ms and 40 ms
    assert s["mean_tpot_ms"] == pytest.approx(30.0)
    # ITL: every chunk gap, pooled
    assert s["mean_itl_ms"] == pytest.approx(25.0)
    assert s["request_goodput"] == 0.5  # only the first meets ttft <= 200 ms
    assert s["p50_schedule_lag_ms"] == pytest.approx(1.0)


def test_failed_requests_are_counted_and_left_out_of_latency() -> None:
    bad = RequestRecord(2, intended=0.0, sent=0.5, error="HTTP 500: boom", status=500)
    s = summarize([_rec(0, 0.1, [0.01], 2), bad], duration=1.0)
    assert s["failed"] == 1 and s["completed"] == 1
    assert s["errors"] == {"HTTP 500: boom": 1}
    assert s["max_schedule_lag_ms"] == pytest.approx(500.0)  # lag counts for every request
    assert s["request_goodput"] is None


def test_per_token_itl() -> None:
    exact = _rec(0, 0.1, [0.02, 0.03], 4, chunk_tokens=[2, 1])
    assert per_token_itl(exact) == pytest.approx([0.01, 0.01, 0.03])
    even = _rec(0, 0.1, [0.02, 0.04], 5)  # 4 tokens after the first over 2 chunks
    assert per_token_itl(even) == pytest.approx([0.01, 0.01, 0.02, 0.02])
    assert per_token_itl(_rec(0, 0.1, [0.02, 0.04], 3)) == pytest.approx([0.02, 0.04])


def test_windows_group_by_intended_send_time() -> None:
    recs = [_rec(i, 0.01, [], 1) for i in range(25)]  # intended every 0.1 s
    w = windows(recs, 1.0)
    assert [x["sent"] for x in w] == [10, 10, 5]
