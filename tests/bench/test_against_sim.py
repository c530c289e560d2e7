"""Against the simulator at low load, bench's TTFT and TPOT agree with the simulator's own
histograms (``vllm:time_to_first_token_seconds``, ``vllm:time_per_output_token_seconds``)
within 1 ms (TTFT: plus the loopback cost measured in the same run). The simulator runs in its
own process; histogram deltas around the measured run leave the warm-up requests out."""

from __future__ import annotations

import http.client
import re
import statistics
import time
import urllib.parse
import urllib.request

from fleetgate.bench import LoadPoint, PointOptions, Target, run_point, synthetic
from fleetgate.bench.lengths import parse_length_dist as dist
from fleetgate.sim import SimConfig
from tests.bench.upstream import serve_sim

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:time_per_output_token_seconds"


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for name in (TTFT, TPOT):
        for part in ("sum", "count"):
            m = re.search(rf"^{re.escape(name)}_{part}{{[^}}]*}} (\S+)", text, re.M)
            assert m is not None, name
            out[f"{name}_{part}"] = float(m.group(1))
    return out


def _mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float:
    count = after[f"{name}_count"] - before[f"{name}_count"]
    assert count > 0
    return (after[f"{name}_sum"] - before[f"{name}_sum"]) / count * 1000.0


def _loopback_rtt_ms(url: str) -> float:
    """Median round trip of a tiny request on a kept-alive connection to the simulator: the
    client measures TTFT on its side of the socket, the simulator on its side, so their
    difference includes this much however exact both are."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    samples = []
    try:
        for _ in range(15):
            started = time.perf_counter()
            conn.request("GET", "/health")
            conn.getresponse().read()
            samples.append((time.perf_counter() - started) * 1000.0)
    finally:
        conn.close()
    return statistics.median(samples[3:])


def _attempt(url: str, seed: int) -> tuple[float, float, float, float]:
    target = Target(url, model="tiny", ignore_eos=True)
    specs = synthetic(20, dist("fixed:40"), dist("fixed:6"), seed=seed)
    before = _scrape(url)
    res = run_point(PointOptions(target=target, pool=specs), LoadPoint("concurrency", 1, 20))
    after = _scrape(url)
    s = res.summary
    assert s["completed"] == 20 and s["usage_reported"] == 20
    assert s["total_output_tokens"] == 120
    sim_ttft, sim_tpot = _mean_ms(before, after, TTFT), _mean_ms(before, after, TPOT)
    assert sim_ttft > 15 and sim_tpot > 7  # the timing model is really in play
    return s["mean_ttft_ms"], sim_ttft, s["mean_tpot_ms"], sim_tpot


def test_ttft_and_tpot_match_simulator_histograms_within_1ms() -> None:
    config = SimConfig(model="tiny", prefill_ms_per_token=0.5, decode_ms_per_step=8.0, seed=1)
    warm = synthetic(3, dist("fixed:40"), dist("fixed:6"), seed=100)
    attempts = []
    with serve_sim(config) as url:
        # 1 ms, plus what the client's side of the socket adds on this box: the loopback round
        # trip and the client's own read and parse, about three round trips (~0.5 ms here).
        # Still sharp: a definition mismatch is ~28 ms, one decode step 8 ms.
        ttft_tolerance = 1.0 + 3 * _loopback_rtt_ms(url)
        target = Target(url, model="tiny", ignore_eos=True)
        run_point(PointOptions(target=target, pool=warm), LoadPoint("concurrency", 1, 3))
        # Up to six fresh runs: a definition mismatch (e.g. counting a role-only chunk as the
        # first token: ~28 ms) fails every one; a noisy neighbour on a shared CI box does not.
        for seed in (3, 4, 5, 6, 7, 8):
            b_ttft, s_ttft, b_tpot, s_tpot = _attempt(url, seed)
            attempts.append(
                (round(b_ttft, 2), round(s_ttft, 2), round(b_tpot, 2), round(s_tpot, 2))
            )
            if abs(b_ttft - s_ttft) <= ttft_tolerance and abs(b_tpot - s_tpot) <= 1.0:
                break
    b_ttft, s_ttft, b_tpot, s_tpot = attempts[-1]
    assert abs(b_ttft - s_ttft) <= ttft_tolerance, (attempts, ttft_tolerance)
    assert abs(b_tpot - s_tpot) <= 1.0, attempts
