"""What makes fleetgate's p99: every loop step over 1 ms and every GC, recorded under wrk load.

    .venv/bin/python bench/overhead/tail.py                               # this tree
    .venv/bin/python bench/overhead/tail.py --baseline-src /work/wt-base/src --duration 4

Starts the instant upstream (``upstream.py``) and, for this tree and ``--baseline-src``,
fleetgate in process (``tail_probe.py``: ``serve_forever`` with ``configs/core.yaml``, on the
standard asyncio loop so that every callback can be timed and attributed), then runs wrk
(JSON c=1, SSE c=64, ``--duration`` s each, after a warm-up) and prints, per window: wrk's
p50/p99, the garbage collections by generation (count, total and longest ms), the callbacks
over ``--slow-ms`` grouped by owner (a task's coroutine and where it stopped), and the loop
iterations over ``--slow-ms``. The asyncio loop is slower than uvloop, so compare the lists,
not the latencies, with ``run.py``'s; what is listed does not depend on how busy the box is,
how long it took does (a loaded box stretches everything, so look at what appears in only one
tree or grows with the load).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import wrkrun
from targets import CHAT_PATH, fleetgate_config, start_upstream

from procs import Proc, free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MASTER_KEY = "sk-fleetgate-tail-0000"
WINDOWS = (("idle", 0), ("json", 1), ("sse", 64))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", type=Path, default=REPO / "src", help="this tree's src/")
    p.add_argument("--baseline-src", type=Path, help="the tree to compare with (its src/)")
    p.add_argument("--duration", type=float, default=4.0, help="seconds of wrk per window")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of wrk before each window")
    p.add_argument("--slow-ms", type=float, default=1.0)
    p.add_argument("--wall", action="store_true", help="time callbacks by wall clock, not CPU")
    p.add_argument("--top", type=int, default=12, help="owners listed per window")
    p.add_argument("--config", type=Path, help="config template ({upstream}); default core.yaml")
    p.add_argument("--json-out", type=Path, help="write the raw records here")
    return p.parse_args(argv)


def _probe(
    name: str, src: Path, upstream: str, work: Path, args: argparse.Namespace
) -> tuple[Proc, str, Path, Path]:
    config = fleetgate_config(work / f"{name}.yaml", upstream, args.config)
    port = free_port()
    out, ready = work / f"{name}-tail.json", work / f"{name}.ready"
    argv = [sys.executable, str(HERE / "tail_probe.py"), "--config", str(config)]
    argv += ["--data-dir", str(work / f"{name}-data"), "--port", str(port)]
    argv += ["--out", str(out), "--ready", str(ready), "--slow-ms", str(args.slow_ms)]
    argv += ["--wall"] if args.wall else []
    env = {"PYTHONPATH": f"{src}{os.pathsep}{HERE}", "FLEETGATE_MASTER_KEY": MASTER_KEY}
    proc = Proc.start(name, argv, work, env, cwd=work)
    deadline = time.monotonic() + 120
    while not ready.exists():
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start:\n{proc.log_tail()}")
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}{CHAT_PATH}", out, ready


def _drive(
    proc: Proc, url: str, work: Path, args: argparse.Namespace
) -> list[tuple[str, int, Any]]:
    results = []
    for mode, conc in WINDOWS:
        if mode == "idle":  # nothing in flight: what the background does on its own
            os.kill(proc.popen.pid, signal.SIGUSR1)
            time.sleep(args.duration)
            os.kill(proc.popen.pid, signal.SIGUSR1)
            results.append((mode, conc, None))
            time.sleep(0.3)
            continue
        script = wrkrun.write_script(work / f"{mode}.lua", mode == "sse", MASTER_KEY)
        wrkrun.run(url, script, conc, args.warmup)
        os.kill(proc.popen.pid, signal.SIGUSR1)
        output = wrkrun.run(url, script, conc, args.duration)
        os.kill(proc.popen.pid, signal.SIGUSR1)
        results.append((mode, conc, wrkrun.WrkResult.parse(output)))
        time.sleep(0.3)
    return results


def _summarise(name: str, raw: dict[str, Any], loads: list[tuple[str, int, Any]], top: int) -> str:
    marks = [t for _, t in raw["marks"]]
    lines = [f"== {name}: gc threshold {raw['gc_threshold']}, frozen {raw['gc_frozen']}"]
    heap = raw.get("heap") or {}
    if heap:
        lines.append(
            f"   after the load: tracked objects by generation {heap['tracked_by_generation']}, "
            f"one full collection {heap['full_collection_ms']:.1f} ms CPU; most common: "
            + ", ".join(f"{name} {count}" for name, count in heap.get("kinds", [])[:10])
        )
    lines.append(f"   tasks at the first mark ({len(raw['tasks'])}):")
    lines += [f"     {task[:200]}" for task in raw["tasks"]]
    for i, (mode, conc, result) in enumerate(loads):
        lo, hi = marks[2 * i], marks[2 * i + 1]
        span = hi - lo
        if result is None:
            lines.append(f"-- {mode}: {span:.1f} s with nothing in flight")
        else:
            lines.append(
                f"-- {mode} c={conc}: {result.completed} requests in {span:.1f} s, "
                f"p50 {result.median_e2el_ms:.2f} ms, p99 {result.p99_e2el_ms:.2f} ms, "
                f"max {result.max_e2el_ms:.2f} ms"
            )
        if conc == 1:
            lines += _cycles(raw["starts"], lo, hi)
        lines += _background(raw["snapshots"][2 * i], raw["snapshots"][2 * i + 1], span, top)
        gcs: dict[int, list[float]] = defaultdict(list)
        for start, took, gen, _ in raw["gcs"]:
            if lo <= start <= hi:
                gcs[gen].append(took * 1e3)
        for gen in sorted(gcs):
            ms = gcs[gen]
            lines.append(
                f"   gc gen{gen}: {len(ms)} collections, {sum(ms):.1f} ms total, "
                f"longest {max(ms):.2f} ms"
            )
        owners: dict[str, list[float]] = defaultdict(list)
        for start, took, owner in raw["slow"]:
            if lo <= start <= hi:
                owners[owner].append(took * 1e3)
        iters = [took * 1e3 for start, took in raw["iterations"] if lo <= start <= hi]
        total = sum(sum(v) for v in owners.values())
        lines.append(
            f"   callbacks >= slow: {sum(len(v) for v in owners.values())} "
            f"({total:.1f} ms); loop iterations >= slow: {len(iters)} ({sum(iters):.1f} ms)"
        )
        ranked = sorted(owners.items(), key=lambda kv: sum(kv[1]), reverse=True)[:top]
        for owner, ms in ranked:
            lines.append(
                f"   {len(ms):5d} x  total {sum(ms):8.1f} ms  max {max(ms):7.2f} ms  {owner[:230]}"
            )
        lines += _inside(raw, lo, hi, top)
    return "\n".join(lines)


def _cycles(starts: list[list[float]], lo: float, hi: float) -> list[str]:
    """At concurrency 1: the loop thread's CPU from one request's start to the next's."""
    inside = [cpu for wall, cpu in starts if lo <= wall <= hi]
    cycles = sorted((b - a) * 1e3 for a, b in zip(inside, inside[1:], strict=False))
    if len(cycles) < 100:
        return []

    def at(q: float) -> float:
        return cycles[min(len(cycles) - 1, int(q * len(cycles)))]

    return [
        f"   loop CPU per request cycle: p50 {at(0.5):.3f} ms, p90 {at(0.9):.3f}, "
        f"p99 {at(0.99):.3f}, p99.9 {at(0.999):.3f}, max {cycles[-1]:.3f} ({len(cycles)} cycles)"
    ]


def _background(
    before: dict[str, list[float]], after: dict[str, list[float]], span: float, top: int
) -> list[str]:
    """Every callback owner other than request handling, by loop time per second."""
    rows = []
    for key, (count, secs) in after.items():
        c0, s0 = before.get(key, (0, 0.0))
        if count - c0 and "RequestHandler" not in key:
            rows.append((secs - s0, count - c0, key))
    rows.sort(reverse=True)
    lines = ["   callbacks by owner (not request handling): wakeups/s, loop ms/s"]
    for secs, count, key in rows[:top]:
        lines.append(f"   {count / span:8.1f}/s {secs * 1e3 / span:7.2f} ms/s  {key[:150]}")
    return lines


def _inside(raw: dict[str, Any], lo: float, hi: float, top: int) -> list[str]:
    """Stack samples taken while a slow callback ran, grouped by their innermost frames."""
    spans = sorted((s, s + t) for s, t, _ in raw["slow"] if lo <= s <= hi)
    samples = [x for x in raw.get("samples", []) if lo <= x[0] <= hi]
    if not spans or not samples:
        return []
    stacks: dict[str, int] = defaultdict(int)
    others: dict[str, int] = defaultdict(int)
    j = 0
    inside = 0
    for t, inner, threads in samples:
        while j < len(spans) and spans[j][1] < t:
            j += 1
        if j < len(spans) and spans[j][0] <= t:
            inside += 1
            stacks[" < ".join(inner[:5])] += 1
            for frame in threads:
                others[frame] += 1
    lines = [f"   stack samples inside slow callbacks: {inside} of {len(samples)}"]
    for stack, n in sorted(stacks.items(), key=lambda kv: kv[1], reverse=True)[:top]:
        lines.append(f"   {n:5d}  {stack[:260]}")
    lines.append("   other threads at those samples:")
    for frame, n in sorted(others.items(), key=lambda kv: kv[1], reverse=True)[:5]:
        lines.append(f"   {n:5d}  {frame[:200]}")
    return lines


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    trees = [("fleetgate", args.src)]
    if args.baseline_src is not None:
        trees.append(("baseline", args.baseline_src))
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="fg-tail-") as tmp:
        work = Path(tmp)
        upstream = start_upstream(work, 1)
        stack.callback(upstream.proc.stop)
        print(f"load average at start: {os.getloadavg()}", flush=True)
        raws: dict[str, Any] = {}
        for name, src in trees:
            proc, url, out, _ = _probe(name, src, upstream.base_url, work, args)
            try:
                loads = _drive(proc, url, work, args)
            finally:
                proc.popen.send_signal(signal.SIGTERM)
                proc.popen.wait(timeout=60)
            raw = json.loads(out.read_text())
            raws[name] = raw
            print(_summarise(name, raw, loads, args.top), flush=True)
        print(f"load average at end: {os.getloadavg()}")
        if args.json_out is not None:
            args.json_out.write_text(json.dumps(raws))


if __name__ == "__main__":
    main()
