"""Per-request cost of fleetgate, counted rather than timed: calls, allocations, CPU time.

    .venv/bin/python bench/overhead/calls.py --baseline-src /tmp/before/src
    .venv/bin/python bench/overhead/calls.py --requests 100 --reps 3 --top 10

Serves ``--requests`` JSON and SSE chat completions (the wrk body of ``run.py``, with
``stream_options.include_usage``) one after another through the real app in process
(``calls_probe.py``: ``serve_forever``, the default overhead config ``configs/core.yaml``,
every gateway-core feature on) against the instant upstream (``upstream.py``), for this tree
and for ``--baseline-src``, and prints per request: function calls (cProfile), allocations and
requested bytes (``alloc_counter``), tracemalloc's peak and retained bytes, and CPU time
(median of ``--reps`` passes), with ratios this/baseline. Call and allocation counts do not
depend on how busy the machine is; CPU time does, so judge it only on an idle machine.

The upstream and the client are one other process (``calls_peer.py``) that sends each stream in
lockstep: an event goes out once the client has received the one before, so each reaches the
gateway on a read of its own, as an engine's tokens do, and the counts do not depend on timing.
The cost of one streamed chunk: SSE requests whose streams carry ``--long-repeat`` times the
words, minus the short stream, per extra event.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from targets import fleetgate_config
from upstream import WORDS
from wrkrun import request_body

from procs import Proc, free_port, http_ok

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MASTER_KEY = "sk-fleetgate-calls-0000"
METRICS = (  # key, label, digits
    ("calls", "calls", 0),
    ("allocs", "allocations", 0),
    ("alloc_bytes", "bytes allocated", 0),
    ("peak_bytes", "tracemalloc peak (pass)", 0),
    ("retained_bytes", "tracemalloc retained", 1),
    ("cpu_us", "CPU us (median)", 1),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", type=Path, default=REPO / "src", help="this tree's src/")
    p.add_argument("--baseline-src", type=Path, help="the tree to compare with (its src/)")
    p.add_argument("--requests", type=int, default=300, help="requests per pass and mode")
    p.add_argument("--warmup", type=int, default=200, help="requests before measuring")
    p.add_argument("--reps", type=int, default=5, help="CPU passes (median)")
    p.add_argument("--top", type=int, default=15, help="functions listed by calls and time")
    p.add_argument("--idle-s", type=float, default=3.0, help="background-cost window (s)")
    p.add_argument("--long-repeat", type=int, default=4, help="the long stream: words x N")
    p.add_argument("--json-out", type=Path, help="also write every figure here")
    p.add_argument(
        "--profile-dir",
        type=Path,
        help="keep the profiles here (<tree>-<mode>.pstats: python -m pstats FILE)",
    )
    args = p.parse_args(argv)
    for src in (args.src, args.baseline_src):
        if src is not None and not (src / "fleetgate" / "__init__.py").is_file():
            p.error(f"{src}: no fleetgate package there")
    if args.long_repeat < 2:
        p.error("--long-repeat must be at least 2")
    return args


def sse_chunks(repeat: int) -> int:
    """Events the client receives: role, words, finish, usage, [DONE]."""
    return 1 + len(WORDS) * repeat + 1 + 1 + 1


def start_peer(stack: ExitStack, log_dir: Path) -> int:
    """``calls_peer.py`` (the upstream and the client); its port."""
    port = free_port()
    argv = [sys.executable, str(HERE / "calls_peer.py"), "--port", str(port)]
    proc = Proc.start("peer", argv, log_dir)
    stack.callback(proc.stop)
    url = f"http://127.0.0.1:{port}"
    proc.wait_ready(lambda: http_ok(url + "/v1/chat/completions", request_body(False)), 30)
    return port


def probe(src: Path, name: str, peer_port: int, work: Path, args: argparse.Namespace) -> Any:
    """Run ``calls_probe.py`` with ``src`` first on the path; its results, with the cost of
    one chunk (long stream minus short stream, per extra event)."""
    config = fleetgate_config(work / f"{name}.yaml", f"http://127.0.0.1:{peer_port}", None)
    argv = [sys.executable, str(HERE / "calls_probe.py"), "--config", str(config)]
    out = work / f"{name}.json"
    argv += ["--data-dir", str(work / f"{name}-data"), "--port", str(free_port())]
    argv += ["--out", str(out)]
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        argv += ["--profile-out", str(args.profile_dir.resolve() / name)]
    argv += ["--peer-port", str(peer_port), "--long-repeat", str(args.long_repeat)]
    argv += ["--requests", str(args.requests), "--warmup", str(args.warmup)]
    argv += ["--reps", str(args.reps), "--top", str(args.top), "--idle-s", str(args.idle_s)]
    env = {**os.environ, "PYTHONPATH": f"{src}:{HERE}", "FLEETGATE_MASTER_KEY": MASTER_KEY}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, check=False)
    outcome = json.loads(out.read_text()) if out.exists() else {}
    if "results" not in outcome:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise RuntimeError(f"probe of {src} failed: {outcome.get('error')}\n{tail}")
    results = outcome["results"]
    extra = sse_chunks(args.long_repeat) - sse_chunks(1)
    long, short = results.pop("sse_long"), results["sse"]
    results["sse_chunk"] = {k: _per(long.get(k), short.get(k), extra) for k, _, _ in METRICS}
    return results


def _per(long: float | None, short: float | None, extra: int) -> float | None:
    if long is None or short is None:
        return None
    return (long - short) / extra


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def table(results: dict[str, Any], names: list[str]) -> str:
    """Rows: mode x metric; columns: each tree, then this/baseline."""
    head = ["per", "metric", *names] + (["ratio"] if len(names) == 2 else [])
    rows = [head]
    for mode, label in (("json", "JSON req"), ("sse", "SSE req"), ("sse_chunk", "SSE chunk")):
        for key, metric, digits in METRICS:
            if mode == "sse_chunk" and key == "peak_bytes":
                continue
            values = [results[n][mode].get(key) for n in names]
            row = [label, metric, *(_fmt(v, digits) for v in values)]
            if len(names) == 2:
                base, this = values[1], values[0]
                row.append("n/a" if not base or this is None else f"{this / base:.3f}")
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def top_lists(results: dict[str, Any], names: list[str]) -> str:
    out = []
    for name in names:
        for mode in ("json", "sse"):
            for key, what in (("top_calls", "calls"), ("top_cumulative_us", "cumulative us")):
                out.append(f"\n{name} {mode}: top functions by {what} per request")
                out += [f"  {value:>10,.2f}  {label}" for label, value in results[name][mode][key]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trees = {"this": args.src}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fg-calls-")))
        peer = start_peer(stack, work)
        results = {name: probe(src, name, peer, work, args) for name, src in trees.items()}
    names = list(trees)
    print(f"per request, {args.requests} requests per pass, sequential (c=1); ", end="")
    print(f"SSE chunk: ({sse_chunks(args.long_repeat)} - {sse_chunks(1)} events), lockstep")
    print(table(results, names))
    for name in names:
        idle = results[name]["idle_per_s"]
        print(
            f"{name}: background per second (subtracted above): {idle['calls']:,.0f} calls, ",
            end="",
        )
        print(f"{idle['allocs']:,.0f} allocations, {idle['cpu_s'] * 1e3:.1f} ms CPU; ", end="")
        print(f"lockstep stalls: {results[name]['stalls']}")
    print(top_lists(results, names))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
