"""Scheduling benchmark: the scheduler against a plain FIFO baseline, on one simulated engine.

Each scenario runs twice in the same invocation, on a fresh engine each time: ``fifo`` is the
gateway without the scheduling stage (every request goes to the engine at once; the engine's
own FIFO queue decides), ``fair`` is the gateway with the scheduler. Requests are streamed
chat completions with ``MAX_TOKENS`` output tokens each (``ignore_eos``).

- ``flood``: team B sends steady Poisson traffic (B alone first, then with the flood) while
  team A keeps 5x its share of the engine's slots outstanding (closed loop). Reports B's TTFT
  p95 with the flood against B alone, and the output tokens/s of the whole engine against
  FIFO's. ``fair`` gives B ``--guaranteed`` requests in flight.
- ``critical``: a ``critical`` team's Poisson traffic under a ``batch`` team's closed-loop
  flood; its TTFT p95 against its solo run. ``fair`` gives it ``--guaranteed`` too.

The engine runs vLLM v1's priority policy in both modes (the FIFO gateway sends no priority,
so it is first come first served): it takes waiting requests by priority but never preempts a
running one for a slot (``--engine-preempts``: vLLM V0's policy, which does). In ``fair`` the
pool's ``max_num_seqs`` is the engine's (``--pool-seqs``), ``priority: true``,
``queue_pacing`` (``--queue-pacing``, default 1.25) and ``critical_reserve``
(``--critical-reserve``, default 0); ``--fair-config`` adds any other ``scheduling:`` field
(JSON, e.g. ``{"critical_reserve_hold_s": 5, "preempt_streams_for_claims": "borrowers"}``).
A stream ended with an error event (cancelled by the scheduler) is counted as ``cut``.
Each TTFT is split into the gateway's and the engine's
parts (``breakdown.py``, from the simulator's ``GET /sim/timings``).
- ``backlog``: two teams of equal weight both backlogged, A with 3x B's outstanding requests.
  The tokens served to each (prompt + output, from the stream's usage, counted as requests
  end) after both started; the largest difference at any completion against the VTC bound
  ``2 x (L_in + C x L_out)``, and the scheduler's own counters (``/admin/queues``, sampled
  every 100 ms) against ``L_in + C x L_out``.

    python bench/scheduling/run.py [--duration 15] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from breakdown import breakdown, engine_timings  # noqa: E402
from load import MAX_TOKENS, Sample, closed_loop, pct, poisson  # noqa: E402
from report import markdown  # noqa: E402

from procs import REPO, Engine, Gateway, gateway_process, sim_process  # noqa: E402

MODES = ("fifo", "fair")


@dataclass
class Args:
    duration: float
    rate: float
    guaranteed: int
    critical_reserve: float
    queue_pacing: float | None
    pool_seqs: int | None  # the pool's max_num_seqs in ``fair`` (None: the engine's)
    extra: dict[str, Any]  # more of the ``scheduling:`` section in ``fair`` (--fair-config)
    engine: Engine
    tmp: Path
    results: dict[str, Any] = field(default_factory=dict)
    run: int = 0  # the repeat in progress (names its data dirs)


def _ttfts(samples: list[Sample], team: str) -> list[float]:
    return [s.ttft for s in samples if s.team == team and s.status == 200 and s.ttft is not None]


def _summary(samples: list[Sample], team: str) -> dict[str, Any]:
    ttft = _ttfts(samples, team)
    return {
        "requests": sum(1 for s in samples if s.team == team),
        "ok": len(ttft),
        "refused": sum(1 for s in samples if s.team == team and s.status in (429, 503)),
        "cut": sum(1 for s in samples if s.team == team and s.cut),
        "ttft_p50_ms": round(pct(ttft, 0.5) * 1000, 1),
        "ttft_p95_ms": round(pct(ttft, 0.95) * 1000, 1),
        "ttft_max_ms": round(max(ttft, default=float("nan")) * 1000, 1),
    }


def _output_rate(samples: list[Sample], start: float, end: float) -> float:
    """Output tokens/s of the requests that ended within the phase (whole requests: when many
    end together, as fixed-length requests started together do, it moves in steps of them)."""
    tokens = sum(s.completion_tokens for s in samples if s.status == 200 and s.ended <= end)
    return tokens / (end - start)


def _generated_rate(samples: list[Sample], start: float, end: float) -> float:
    """Output tokens/s generated within [start, end]: each request's tokens after the first
    spread evenly from its first token to its end, counted for the part inside the window."""
    tokens = 0.0
    for s in samples:
        if s.status != 200 or s.ttft is None or s.completion_tokens < 1:
            continue
        first = s.sent + s.ttft
        tokens += 1.0 if start <= first <= end else 0.0
        rest = s.completion_tokens - 1
        span = s.ended - first
        if rest and span > 0:
            inside = max(0.0, min(end, s.ended) - max(start, first))
            tokens += rest * inside / span
    return tokens / (end - start)


async def _phase(gw: Gateway, loads: list[Any], duration: float) -> tuple[list[Sample], float]:
    """Run the loads (callables of (session, until, out)) for ``duration``; bounded."""
    out: list[Sample] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.monotonic()
        until = start + duration
        await asyncio.wait_for(
            asyncio.gather(*(load(session, until, out) for load in loads)), duration + 90
        )
    return out, start


def _poisson(url: str, team: str, key: str, rate: float, seed: int) -> Any:
    return lambda s, until, out: poisson(s, url, team, key, rate, until, out, seed)


def _flood(url: str, team: str, key: str, concurrency: int) -> Any:
    return lambda s, until, out: closed_loop(s, url, team, key, concurrency, until, out)


async def flood(a: Args, mode: str) -> dict[str, Any]:
    seqs = a.engine.max_num_seqs
    with sim_process(a.engine, a.tmp) as sim:
        pool = (a.pool_seqs or seqs) if mode == "fair" else None
        with gateway_process(sim, pool, mode == "fair", a.tmp, f"flood-{mode}-{a.run}") as gw:
            team_a, key_a = gw.team_key("flooder")
            team_b, key_b = gw.team_key("steady")
            gw.apply({"enabled": mode == "fair", "critical_reserve": a.critical_reserve,
                      "queue_pacing": a.queue_pacing, **a.extra,
                      "teams": {team_b: {"guaranteed": a.guaranteed}}})  # fmt: skip
            alone, _ = await _phase(gw, [_poisson(gw.url, "B", key_b, a.rate, 1)], a.duration)
            split_alone = breakdown(alone, engine_timings(sim), "B", seqs)
            share = seqs // 2
            loads = [
                _flood(gw.url, "A", key_a, 5 * share),
                _poisson(gw.url, "B", key_b, a.rate, 2),
            ]
            flooded, start = await _phase(gw, loads, a.duration)
            split_flood = breakdown(flooded, engine_timings(sim), "B", seqs)
    b_alone, b_flood = _summary(alone, "B"), _summary(flooded, "B")
    return {
        "b_alone": b_alone,
        "b_flood": b_flood,
        "b_alone_split": split_alone,
        "b_flood_split": split_flood,
        "a_flood": _summary(flooded, "A"),
        "b_p95_ratio": round(b_flood["ttft_p95_ms"] / b_alone["ttft_p95_ms"], 2),
        "output_tokens_per_s": round(_output_rate(flooded, start, start + a.duration), 1),
        "generated_tokens_per_s": round(_generated_rate(flooded, start, start + a.duration), 1),
    }


async def critical(a: Args, mode: str) -> dict[str, Any]:
    with sim_process(a.engine, a.tmp) as sim:
        pool = (a.pool_seqs or a.engine.max_num_seqs) if mode == "fair" else None
        with gateway_process(sim, pool, mode == "fair", a.tmp, f"critical-{mode}-{a.run}") as gw:
            team_c, key_c = gw.team_key("oncall", {"priority": "critical"})
            _, key_d = gw.team_key("etl", {"priority": "batch"})
            gw.apply({"enabled": mode == "fair", "critical_reserve": a.critical_reserve,
                      "queue_pacing": a.queue_pacing, **a.extra,
                      "teams": {team_c: {"guaranteed": a.guaranteed}}})  # fmt: skip
            seqs = a.engine.max_num_seqs
            solo, _ = await _phase(gw, [_poisson(gw.url, "C", key_c, a.rate, 3)], a.duration)
            split_solo = breakdown(solo, engine_timings(sim), "C", seqs)
            loads = [
                _flood(gw.url, "D", key_d, 3 * seqs),
                _poisson(gw.url, "C", key_c, a.rate, 4),
            ]
            flooded, start = await _phase(gw, loads, a.duration)
            split_flood = breakdown(flooded, engine_timings(sim), "C", seqs)
    c_solo, c_flood = _summary(solo, "C"), _summary(flooded, "C")
    return {
        "critical_solo": c_solo,
        "critical_flood": c_flood,
        "critical_solo_split": split_solo,
        "critical_flood_split": split_flood,
        "batch_flood": _summary(flooded, "D"),
        "critical_p95_ratio": round(c_flood["ttft_p95_ms"] / c_solo["ttft_p95_ms"], 2),
        "output_tokens_per_s": round(_output_rate(flooded, start, start + a.duration), 1),
        "generated_tokens_per_s": round(_generated_rate(flooded, start, start + a.duration), 1),
    }


async def _sample_counters(gw: Gateway, until: float, out: list[float], teams: list[str]) -> None:
    """The largest gap between the two teams' virtual token counters while both queue."""
    while time.monotonic() < until:
        data = await asyncio.to_thread(gw.queues)
        for pool in data.get("data", []):
            found = pool["teams"]
            if all(found.get(t, {}).get("queued", 0) > 0 for t in teams):
                values = [found[t]["virtual_tokens"] for t in teams]
                out.append(abs(values[0] - values[1]))
        await asyncio.sleep(0.1)


async def backlog(a: Args, mode: str) -> dict[str, Any]:
    seqs = a.engine.max_num_seqs
    with sim_process(a.engine, a.tmp) as sim:
        pool = seqs if mode == "fair" else None
        with gateway_process(sim, pool, mode == "fair", a.tmp, f"backlog-{mode}-{a.run}") as gw:
            team_a, key_a = gw.team_key("wide")
            team_b, key_b = gw.team_key("narrow")
            gw.apply({"enabled": mode == "fair"})
            gaps: list[float] = []
            loads = [_flood(gw.url, "A", key_a, 3 * seqs), _flood(gw.url, "B", key_b, seqs)]
            if mode == "fair":
                teams = [team_a, team_b]
                loads.append(lambda s, until, out: _sample_counters(gw, until, gaps, teams))
            samples, start = await _phase(gw, loads, a.duration)
    end = start + a.duration  # after it the loops stop sending: nobody is backlogged
    done = sorted((s for s in samples if s.status == 200 and s.ended <= end), key=lambda s: s.ended)
    served = {"A": 0, "B": 0}
    worst = 0
    warm = start + 1.0  # both loops running and the pool full
    base: dict[str, int] | None = None
    series: list[tuple[float, int]] = []
    for s in done:
        served[s.team] += s.prompt_tokens + s.completion_tokens
        if s.ended < warm:
            continue
        if base is None:
            base = dict(served)
        gap = (served["A"] - base["A"]) - (served["B"] - base["B"])
        series.append((round(s.ended - start, 2), gap))
        worst = max(worst, abs(gap))
    l_in = max((s.prompt_tokens for s in done), default=0)
    bound = l_in + seqs * MAX_TOKENS
    return {
        "served_tokens": served,
        "max_served_gap": worst,
        "served_bound": 2 * (bound + seqs * l_in),  # inputs counted at the end, not admission
        "max_counter_gap": round(max(gaps), 1) if gaps else None,
        "counter_bound": bound,
        "counter_points": len(gaps),
        "gap_series": series[:: max(1, len(series) // 40)],
    }


SCENARIOS = {"flood": flood, "critical": critical, "backlog": backlog}


BEGIN, END = "<!-- scheduling: begin -->", "<!-- scheduling: end -->"


def _write_docs(text: str) -> None:
    path = REPO / "docs" / "results" / "benchmarks.md"
    page = path.read_text()
    section = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in page:
        head, rest = page.split(BEGIN, 1)
        page = head + section + rest.split(END, 1)[1]
    else:
        page = (
            page.rstrip()
            + "\n\n## Scheduling: admission queues against FIFO\n\n"
            + "`python bench/scheduling/run.py --write-docs`\n\n"
            + section
            + "\n"
        )
    path.write_text(page)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=30.0, help="seconds per phase (<= 120)")
    p.add_argument("--rate", type=float, default=2.0, help="B's and critical's requests/s")
    p.add_argument("--guaranteed", type=int, default=8)
    p.add_argument("--critical-reserve", type=float, default=0.0, help="fair: headroom share")
    p.add_argument("--max-num-seqs", type=int, default=24)
    p.add_argument("--pool-seqs", type=int, default=None, help="the pool's max_num_seqs (fair)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--decode-ms", type=float, default=40.0, help="engine decode ms per step")
    p.add_argument("--engine-preempts", action="store_true", help="vLLM V0's priority policy")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--queue-pacing", type=float, default=1.25, help="fair: queue_pacing (0: off)")
    p.add_argument(
        "--fair-config",
        type=json.loads,
        default={},
        help='fair: more scheduling fields, JSON (e.g. {"critical_reserve_hold_s": 5})',
    )
    p.add_argument("--runs", type=int, default=1, help="repeat each scenario (medians)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--report", type=Path, default=None, help="render a saved --json, run nothing")
    ns = p.parse_args()
    duration = min(max(ns.duration, 2.0), 120.0)
    with tempfile.TemporaryDirectory(prefix="fg-bench-sched-") as tmp:
        a = Args(duration, ns.rate, ns.guaranteed, ns.critical_reserve, ns.queue_pacing or None,
                 ns.pool_seqs, ns.fair_config,
                 Engine(max_num_seqs=ns.max_num_seqs, decode_ms_per_step=ns.decode_ms,
                        preempt_for_priority=ns.engine_preempts),
                 Path(tmp))  # fmt: skip
        if ns.report is not None:
            a.results = json.loads(ns.report.read_text())
        for run in range(min(max(ns.runs, 1), 9)) if ns.report is None else ():
            a.run = run
            for name in ns.scenarios.split(","):
                one: dict[str, Any] = {}
                for mode in ns.modes.split(","):  # the fifo baseline in the same run
                    one[mode] = await SCENARIOS[name](a, mode)
                    print(run, name, mode, json.dumps(one[mode]), flush=True)
                a.results.setdefault(name, []).append(one)
                if ns.json is not None:
                    ns.json.write_text(json.dumps(a.results, indent=2))
    text = markdown(a.results, a.engine, a.duration, a.rate, a.guaranteed, a.critical_reserve,
                    a.queue_pacing, a.extra)  # fmt: skip
    print(text)
    if ns.write_docs:
        _write_docs(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
