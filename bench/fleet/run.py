"""Fleet benchmark (issue #33): 1, 2 and 4 gateway processes in front of one simulated pool.

One ``fleetgate sim`` engine (``max_num_seqs`` 16, vLLM v1's priority policy), ``P`` gateway
processes sharing PostgreSQL (a fresh database per setup: the teams and keys) and Redis (the
limiters and the fleet's shared admission, a fresh key prefix per setup). Teams A and B each
have ``quota.concurrency.nominal: 8`` and ``guaranteed: 8`` (``--guaranteed``); ``--sched``
adds scheduling fields (by default: a claim over the limit cancels a borrower's stream, a
request starved 50 ms cancels one, ``queue_pacing: 1.25``, as in bench/scheduling/run.py, and
``start_before_end: 1``: a stream's slot goes to the next request as it relays its last chunk
but one, so the engine starts that request at the step that frees the slot).
Every client request goes to the processes in turn (a round-robin load balancer).

Per setup: B alone (Poisson, ``--rate``/s), then A flooding (closed loop, 40 outstanding)
while B keeps its rate. Reported from the engine's own per-request records
(``GET /sim/timings``, joined on ``x-request-id``): the most requests the engine held at once
(its running + waiting count as each arrived; ``handlers_open_max``: the most requests its
HTTP server had open, whose ends lag the slot's by the last chunk's write),
the most of A's it held while B had a request outstanding (and once that request had waited
0.25 s: a claim's cancellation of a borrower's stream has landed), B's TTFT p95 with the flood over
its solo p95 (and the target: 1.5x, or solo + two engine steps when larger), the output
tokens/s generated during the flood against the engine's capacity measured in the same round
(one gateway with the scheduler off, A flooding: the engine always full).

``--local 2`` adds that many processes without Redis (each process admits alone: today's behaviour
before the fleet). Medians of ``--runs`` rounds; this host is shared and noisy: rerun on an
idle machine.

    python bench/fleet/run.py [--procs 1,2,4] [--runs 5] [--duration 10] [--local 2] [--json out]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scheduling"))

from breakdown import engine_timings  # noqa: E402
from load import Sample, pct, stream_one  # noqa: E402

from fleetgate.cli.processes import free_port, stop, wait_http  # noqa: E402
from procs import MASTER, Engine, _admin, _env, sim_process  # noqa: E402

SEQS = 16
NOMINAL = 8
FLOOD = 40  # A's outstanding requests
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


# ---------------------------------------------------------------------------- processes


async def _database(drop: str | None = None) -> str:
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        if drop is not None:
            await conn.execute(f'DROP DATABASE IF EXISTS "{drop}" WITH (FORCE)')
            return drop
        name = f"fleetbench_{os.getpid()}_{secrets.token_hex(4)}"
        await conn.execute(f'CREATE DATABASE "{name}"')
        return name
    finally:
        await conn.close()


@contextmanager
def fleet(
    procs: int, sim: str, tmp: Path, redis: str | None, db: str, sched: dict[str, Any],
    guaranteed: int,
) -> Iterator[list[str]]:  # fmt: skip
    """``procs`` gateways on one config; teams A and B made, the scheduling config applied."""
    tag = secrets.token_hex(4)
    dep = {"model": "tiny", "api_base": f"{sim}/v1", "engine": "vllm", "priority": True,
           "max_num_seqs": SEQS}  # fmt: skip
    base: dict[str, Any] = {
        "models": [{"alias": "tiny", "deployments": [dep]}],
        "health": {"probe_interval_s": 30},
        "server": {"access_log": False},
        "tenancy": {
            "audit_requests": False,
            "spool_fsync": False,
            "poll_interval_s": 0.2,
            "redis_prefix": f"fb{tag}:",
        },  # fmt: skip
    }
    path = tmp / f"gw-{tag}.yaml"
    path.write_text(yaml.safe_dump({**base, "scheduling": sched}))
    env = {**_env(), "FLEETGATE_MASTER_KEY": MASTER,
           "FLEETGATE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{db}"}  # fmt: skip
    if redis is not None:
        env["FLEETGATE_REDIS_URL"] = redis
    with ExitStack() as stack:
        started = []
        for i in range(procs):
            port = free_port()
            cmd = [sys.executable, "-m", "fleetgate.cli.main", "--log-level", "WARNING",
                   "serve", "--config", str(path), "--port", str(port),
                   "--data-dir", str(tmp / f"data-{tag}-{i}"), "--no-watch"]  # fmt: skip
            log = stack.enter_context((tmp / f"gw-{tag}-{i}.log").open("wb"))
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            stack.callback(stop, proc)
            started.append((f"http://127.0.0.1:{port}", proc))
        for url, proc in started:
            wait_http(f"{url}/health/live", proc, timeout=120)
        urls = [url for url, _ in started]
        keys = {}
        teams = {}
        for name in ("A", "B"):
            team = _admin(urls[0], "POST", "/admin/teams", {"name": f"team-{name}-{tag}"})
            keys[name] = _admin(urls[0], "POST", "/admin/keys", {"team": team["id"]})["key"]
            teams[name] = team["id"]
        quota = {"quota": {"concurrency": {"nominal": NOMINAL}}, "guaranteed": guaranteed}
        full = {**sched, "teams": {teams["A"]: quota, teams["B"]: quota},
                "fleet": {**sched.get("fleet", {}), "key_prefix": f"fb{tag}:sched:"}}  # fmt: skip
        path.write_text(yaml.safe_dump({**base, "scheduling": full}))
        for url in urls:
            _admin(url, "POST", "/admin/config/reload")
        time.sleep(1.0)  # every process has read the keys from the store
        yield [*urls, keys["A"], keys["B"]]


# ---------------------------------------------------------------------------- load


async def _poisson(
    session: aiohttp.ClientSession, urls: list[str], key: str, rate: float, until: float,
    out: list[Sample], seed: int,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    turn = itertools.cycle(urls)
    tasks: list[asyncio.Task[Sample]] = []
    next_at = time.monotonic()
    while True:
        next_at += rng.expovariate(rate)
        if next_at >= until:
            break
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        tasks.append(asyncio.create_task(stream_one(session, next(turn), "B", key, out)))
    await asyncio.gather(*tasks)


async def _flood(
    session: aiohttp.ClientSession, urls: list[str], key: str, until: float, out: list[Sample]
) -> None:
    async def worker(url: str) -> None:
        while time.monotonic() < until:
            sample = await stream_one(session, url, "A", key, out)
            if sample.status != 200:
                await asyncio.sleep(min(1.0, sample.ttft or 0.1))

    await asyncio.gather(*(worker(urls[i % len(urls)]) for i in range(FLOOD)))


async def _phase(loads: list[Any], duration: float) -> tuple[list[Sample], float, float]:
    out: list[Sample] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        start = time.monotonic()
        until = start + duration
        await asyncio.wait_for(
            asyncio.gather(*(load(session, until, out) for load in loads)), duration + 90
        )
    return out, start, start + duration


# ---------------------------------------------------------------------------- measures


def _held(intervals: list[tuple[float, float]], at: list[float] | None = None) -> int:
    """The most intervals open at once (at their starts, or only at the times ``at``)."""
    starts = sorted(a for a, _ in intervals)
    ends = sorted(b for _, b in intervals)
    points = sorted(at) if at is not None else starts
    best = 0
    for t in points:
        best = max(best, bisect.bisect_right(starts, t) - bisect.bisect_left(ends, t))
    return best


def _settled_points(
    b_spans: list[tuple[float, float]], a_starts: list[float], settle: float
) -> list[float]:
    """The moments B had a request outstanding for at least ``settle`` seconds: each such
    request's ``sent + settle``, and every A start while one was."""
    settled = [(x + settle, y) for x, y in b_spans if y - x > settle]
    if not settled:
        return []
    starts, ends = sorted(x for x, _ in settled), sorted(y for _, y in settled)
    return [x for x, _ in settled] + [
        t for t in a_starts
        if bisect.bisect_right(starts, t) - bisect.bisect_left(ends, t) > 0
    ]  # fmt: skip


def _engine(
    samples: list[Sample], timings: dict[str, dict[str, Any]], settle: float = 0.25
) -> dict[str, Any]:
    team_of = {s.request_id: s.team for s in samples if s.request_id}
    spans: dict[str, list[tuple[float, float]]] = {"A": [], "B": [], "all": []}
    for rid, t in timings.items():
        team = team_of.get(rid)
        if team is None or t["arrival"] is None or t["ended"] is None:
            continue
        span = (t["arrival"], t["ended"])
        spans[team].append(span)
        spans["all"].append(span)
    # A's requests at the engine at the moments B had one outstanding (sent .. ended).
    b_spans = [(s.sent, s.ended) for s in samples if s.team == "B"]
    b_starts, b_ends = sorted(x for x, _ in b_spans), sorted(y for _, y in b_spans)
    candidates = [x for x, _ in spans["A"]] + b_starts
    busy = [
        t for t in candidates
        if bisect.bisect_right(b_starts, t) - bisect.bisect_left(b_ends, t) > 0
    ]  # fmt: skip
    # the same once B's request has waited ``settle`` (the time a claim takes to cancel a
    # borrower's stream and the slot to come back): what A holds while B has work, after it
    settled = _settled_points(b_spans, [x for x, _ in spans["A"]], settle)
    # B's time from sending to the engine's arrival (the gateways' queues): how many of B's
    # requests waited over 50 ms for a slot, and what A held at the engine 50 ms into such a
    # wait (a B request waiting for a slot: the moment "A within its share" matters)
    to_engine = sorted(
        timings[s.request_id]["arrival"] - s.sent
        for s in samples
        if s.team == "B" and s.request_id in timings and timings[s.request_id]["arrival"]
    )
    queued = [
        s.sent + 0.05
        for s in samples
        if s.team == "B" and s.request_id in timings and timings[s.request_id]["arrival"]
        and timings[s.request_id]["arrival"] - s.sent > 0.05
    ]  # fmt: skip
    # The engine's own count (running + waiting) as each request arrived, that one included:
    # the count grows only at an arrival, so its largest value is the most it ever held.
    # (The spans above end when the engine's HTTP handler ends, after the last chunk's write:
    # a slot freed a moment before a new arrival still counts there.)
    counted = [
        t["running_at_arrival"] + t["waiting_at_arrival"] + 1
        for rid, t in timings.items()
        if rid in team_of and t.get("running_at_arrival") is not None
    ]
    return {
        "b_to_engine_p99_ms": round(pct(to_engine, 0.99) * 1000, 1) if to_engine else 0.0,
        "b_queued_over_50ms": len(queued),
        "a_held_max_while_b_queued": _held(spans["A"], queued) if queued else 0,
        "engine_held_max": max(counted, default=0),
        "handlers_open_max": _held(spans["all"]),
        "a_held_max_while_b": _held(spans["A"], busy) if busy else 0,
        "a_held_max_while_b_settled": _held(spans["A"], settled) if settled else 0,
        "a_held_max": _held(spans["A"]),
    }


def _generated_rate(samples: list[Sample], start: float, end: float) -> float:
    tokens = 0.0
    for s in samples:
        if s.status != 200 or s.ttft is None or s.completion_tokens < 1:
            continue
        first = s.sent + s.ttft
        tokens += 1.0 if start <= first <= end else 0.0
        rest, span = s.completion_tokens - 1, s.ended - first
        if rest and span > 0:
            tokens += rest * max(0.0, min(end, s.ended) - max(start, first)) / span
    return tokens / (end - start)


def _engine_use(timings: dict[str, dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """What the engine did in [start, end] (its own records): the tokens it generated per
    second, cut requests' included (spread over first token .. end), and the share of its
    slot-seconds a request held (scheduled .. ended): where throughput below capacity went,
    idle slots or work thrown away."""
    tokens = held = 0.0
    for t in timings.values():
        scheduled, first, ended = t.get("scheduled"), t.get("first_token"), t.get("ended")
        if scheduled is None or ended is None:
            continue
        held += max(0.0, min(end, ended) - max(start, scheduled))
        if first is not None and t.get("generated"):
            span = ended - first
            if span <= 0:
                tokens += t["generated"] if start <= first <= end else 0
            else:
                tokens += t["generated"] * max(0.0, min(end, ended) - max(start, first)) / span
    window = end - start
    return {
        "engine_tokens_per_s": round(tokens / window, 1),
        "slot_use": round(held / (SEQS * window), 3),
    }


def _p95(samples: list[Sample], team: str) -> float:
    ttft = [s.ttft for s in samples if s.team == team and s.status == 200 and s.ttft]
    return float(pct(ttft, 0.95)) * 1000


# ---------------------------------------------------------------------------- one setup


async def setup(
    a: argparse.Namespace, engine: Engine, tmp: Path, procs: int, redis: str | None,
    sched: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    db = await _database()
    try:
        with (
            sim_process(engine, tmp) as sim,
            fleet(procs, sim, tmp, redis, db, sched, a.guaranteed) as got,
        ):
            *urls, key_a, key_b = got
            rate = a.rate

            def b_load(seed: int) -> Any:
                return lambda s, until, out: _poisson(s, urls, key_b, rate, until, out, seed)

            def a_load(s: Any, until: float, out: list[Sample]) -> Any:
                return _flood(s, urls, key_a, until, out)

            if not sched.get("enabled", True):  # the capacity run: the engine always full
                flooded, start, end = await _phase([a_load], a.duration)
                return {
                    "tokens_per_s": round(_generated_rate(flooded, start, end), 1),
                    **_engine_use(engine_timings(sim), start, end),
                }
            alone, _, _ = await _phase([b_load(1)], a.duration)
            flooded, start, end = await _phase([a_load, b_load(2)], a.duration)
            timings = engine_timings(sim)
            if a.dump is not None:  # the raw records, to look into one round
                a.dump.mkdir(parents=True, exist_ok=True)
                raw = {"samples": [vars(x) for x in flooded], "timings": timings}
                (a.dump / f"fleet-{procs}-{time.time():.0f}.json").write_text(json.dumps(raw))
    finally:
        await _database(drop=db)
    solo, with_flood = _p95(alone, "B"), _p95(flooded, "B")
    step_ms = engine.decode_ms_per_step * (1 + engine.decode_batch_factor * (SEQS - 1))
    return {
        **_engine(flooded, timings),
        "b_solo_p95_ms": round(solo, 1),
        "b_flood_p95_ms": round(with_flood, 1),
        "b_p95_ratio": round(with_flood / solo, 2),
        "b_target_ms": round(max(1.5 * solo, solo + 2 * step_ms), 1),
        "b_refused": sum(1 for s in flooded if s.team == "B" and s.status in (429, 503)),
        "b_cut": sum(1 for s in flooded if s.team == "B" and s.cut),
        "a_cut": sum(1 for s in flooded if s.team == "A" and s.cut),
        "tokens_per_s": round(_generated_rate(flooded, start, end), 1),
        **_engine_use(timings, start, end),
    }


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--procs", default="1,2,4")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=6.0, help="B's requests per second")
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument(
        "--local", default="", help="process counts also run alone, without Redis (e.g. 2)"
    )
    p.add_argument("--guaranteed", type=int, default=NOMINAL, help="each team's guarantee")
    p.add_argument(
        "--sched",
        default='{"preempt_streams_for_claims": "borrowers", "queue_pacing": 1.25,'
        ' "preempt_in_flight_after_s": 0.05, "start_before_end": 1}',
    )
    p.add_argument("--json", type=Path, help="write every round's results here")
    p.add_argument("--dump", type=Path, help="write each setup's client samples and engine records")
    a = p.parse_args()
    counts = [int(c) for c in a.procs.split(",")]
    runs = min(max(a.runs, 1), 20)
    sched = json.loads(a.sched)
    engine = Engine(max_num_seqs=SEQS)
    setups = [("fleet", a.redis, n) for n in counts]
    setups += [("local", None, int(n)) for n in a.local.split(",") if n]
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for run in range(runs):
            result: dict[str, Any] = {
                "capacity": await setup(a, engine, tmp, 1, None, {"enabled": False})
            }
            for mode, redis, procs in setups:
                result[f"{mode}-{procs}"] = await setup(a, engine, tmp, procs, redis, sched)
            capacity = result["capacity"]["tokens_per_s"]
            for name, r in result.items():
                if name != "capacity":
                    r["tokens_vs_capacity"] = round(r["tokens_per_s"] / capacity, 3)
                    r["engine_vs_capacity"] = round(r["engine_tokens_per_s"] / capacity, 3)
            print(f"round {run + 1}: {json.dumps(result)}", flush=True)
            rounds.append(result)
    if a.json is not None:
        a.json.write_text(json.dumps(rounds, indent=1))
    print(_table(rounds))
    return 0


def _table(rounds: list[dict[str, Any]]) -> str:
    names = [n for n in rounds[0] if n != "capacity"]
    fields = ("engine_held_max", "handlers_open_max", "a_held_max_while_b",
              "a_held_max_while_b_settled",
              "b_queued_over_50ms", "a_held_max_while_b_queued", "b_to_engine_p99_ms",
              "b_p95_ratio", "b_flood_p95_ms",
              "b_target_ms", "a_cut", "slot_use", "engine_vs_capacity",
              "tokens_vs_capacity")  # fmt: skip
    lines = ["| setup | " + " | ".join(fields) + " |", "|---" * (len(fields) + 1) + "|"]
    for name in names:
        cells = []
        for f in fields:
            values = [r[name][f] for r in rounds]
            cells.append(f"{statistics.median(values):g} ({min(values):g}..{max(values):g})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cap = [r["capacity"]["tokens_per_s"] for r in rounds]
    use = [r["capacity"]["slot_use"] for r in rounds]
    lines.append(
        f"\ncapacity (scheduler off, A flooding): {statistics.median(cap):g} tokens/s,"
        f" slot use {statistics.median(use):g}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
