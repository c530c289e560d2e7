"""Gateway overhead: direct vs bare relay vs fleetgate vs LiteLLM, same upstream, same run.

    .venv/bin/python bench/overhead/run.py                      # full run, ~10 minutes
    .venv/bin/python bench/overhead/run.py --duration 3 --reps 1 --targets direct,bare
    .venv/bin/python bench/overhead/run.py --write-docs  # + docs/results/benchmarks.md
    .venv/bin/python bench/overhead/run.py --targets direct,bare,fleetgate \
        --baseline-src /tmp/old/src                             # this tree vs another, same run

Every target gets the same wrk load (one thread; concurrency 1 and 64; JSON and SSE with
``stream_options.include_usage``) against one instant upstream, repetitions interleaved across
targets so that drift on the box hits all of them alike; medians are reported. Before that,
on the freshly started process, fleetgate's resident memory is sampled after 10,000 and
100,000 requests (half JSON, half SSE, concurrency 64). Results go to
``bench/results/overhead-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import litellm_env
import machine
import memory
import report
import wrkrun
from targets import Skip, Target, start_bare, start_fleetgate, start_litellm, start_upstream

from procs import descendants

REPO = Path(__file__).resolve().parents[2]
ALL_TARGETS = ("direct", "bare", "fleetgate", "litellm")
BASELINE = report.BASELINE  # fleetgate from --baseline-src, measured beside this tree's
MASTER_KEY = "sk-fleetgate-bench-0000"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults are the documented full run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default=",".join(ALL_TARGETS), help="comma-separated subset")
    p.add_argument("--modes", default="json,sse", help="json, sse or both")
    p.add_argument("--concurrency", default="1,64", help="comma-separated wrk -c values")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up per target/mode")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (median)")
    p.add_argument("--upstream-workers", type=int, default=2 if (os.cpu_count() or 1) >= 8 else 1)
    p.add_argument("--memory-target", default="fleetgate", help="target for the RSS check")
    p.add_argument("--memory-requests", default="10000,100000", help="RSS checkpoints")
    p.add_argument("--memory-max-s", type=float, default=900.0, help="cap on the memory run")
    p.add_argument("--no-memory", action="store_true", help="skip the RSS check")
    p.add_argument("--litellm-venv", type=Path, default=litellm_env.DEFAULT_VENV)
    p.add_argument("--litellm-spec", default=litellm_env.DEFAULT_SPEC)
    p.add_argument("--fleetgate-cmd", help="command that runs the fleetgate CLI")
    p.add_argument("--fleetgate-config", type=Path, help="config template; {upstream} = base URL")
    p.add_argument(
        "--baseline-src",
        type=Path,
        help="also run fleetgate from this source tree (its src/ directory) as target "
        f"'{BASELINE}', same config, interleaved with the others",
    )
    p.add_argument(
        "--baseline-twice",
        action="store_true",
        help=f"also run a second process of --baseline-src as '{report.AGAIN}': its ratios "
        f"to '{BASELINE}' are this run's noise (the same code against itself)",
    )
    p.add_argument(
        "--nice",
        type=int,
        help="run every process of the benchmark at this niceness, its autogroup too (root; "
        "on a shared machine the other work yields to the measurement)",
    )
    p.add_argument("--results-dir", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--write-docs", action="store_true", help="update docs/results/benchmarks.md")
    p.add_argument("--docs", type=Path, default=REPO / "docs" / "results" / "benchmarks.md")
    p.add_argument("--note", default="", help="a sentence to print in the docs section")
    args = p.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = set(args.targets) - set(ALL_TARGETS)
    if unknown:
        p.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if args.baseline_src is not None:
        if not (args.baseline_src / "fleetgate" / "__init__.py").is_file():
            p.error(f"--baseline-src {args.baseline_src}: no fleetgate package there")
        args.targets.append(BASELINE)
        if args.baseline_twice:
            args.targets.append(report.AGAIN)
    elif args.baseline_twice:
        p.error("--baseline-twice needs --baseline-src")
    args.modes = [m for m in args.modes.split(",") if m]
    if set(args.modes) - {"json", "sse"}:
        p.error("--modes takes json and/or sse")
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.memory_requests = [int(n) for n in args.memory_requests.split(",") if n]
    return args


def prioritise(pid: int, nice: int | None) -> None:
    """``nice`` for the process and its children, and for its session's autogroup: with the
    kernel's autogroups a niceness counts only within the session, and every target runs in
    a session of its own (``Proc.start``)."""
    if nice is None:
        return
    for each in descendants(pid):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, each, nice)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def start_targets(
    args: argparse.Namespace, stack: ExitStack, log_dir: Path, info: dict[str, str]
) -> tuple[list[Target], dict[str, str]]:
    """Start the upstream and every selected target; return them and the skipped ones."""
    upstream = start_upstream(log_dir, args.upstream_workers)
    stack.callback(upstream.proc.stop)
    prioritise(upstream.proc.popen.pid, args.nice)
    started, skipped = [], {}
    if "direct" in args.targets:
        started.append(upstream)
    for name in args.targets:
        if name == "direct":
            continue
        print(f"[start] {name}", flush=True)
        try:
            if name == "bare":
                target = start_bare(log_dir, upstream.base_url)
            elif name in ("fleetgate", BASELINE, report.AGAIN):
                target = start_fleetgate(
                    log_dir,
                    upstream.base_url,
                    MASTER_KEY,
                    REPO,
                    args.fleetgate_cmd,
                    args.fleetgate_config,
                    name=name,
                    src=args.baseline_src if name in (BASELINE, report.AGAIN) else None,
                )
            else:
                target, info["litellm"] = start_litellm(
                    log_dir, upstream.base_url, MASTER_KEY, args.litellm_venv, args.litellm_spec
                )
        except Skip as exc:
            skipped[name] = str(exc)
            print(f"[skip] {name}: {exc}", flush=True)
            continue
        stack.callback(target.proc.stop)
        prioritise(target.proc.popen.pid, args.nice)
        started.append(target)
    return started, skipped


def measure(
    args: argparse.Namespace, targets: list[Target], script_dir: Path
) -> dict[report.Cell, list[wrkrun.WrkResult]]:
    """Warm up, then run every (rep, mode, concurrency, target) with targets innermost."""
    scripts = {
        (t.name, mode): wrkrun.write_script(
            script_dir / f"{t.name}-{mode}.lua", mode == "sse", t.api_key
        )
        for t in targets
        for mode in args.modes
    }
    for t in targets:
        for mode in args.modes:
            if args.warmup > 0:
                wrkrun.run(t.url, scripts[(t.name, mode)], 64, args.warmup)
    runs: dict[report.Cell, list[wrkrun.WrkResult]] = {}
    for rep in range(args.reps):
        for mode in args.modes:
            for conc in args.concurrency:
                for t in targets:
                    out = wrkrun.run(t.url, scripts[(t.name, mode)], conc, args.duration)
                    result = wrkrun.WrkResult.parse(out)
                    runs.setdefault((t.name, mode, conc), []).append(result)
                    print(
                        f"[rep {rep + 1}/{args.reps}] {mode:4} c={conc:<3} {t.name:9} "
                        f"{result.request_throughput:9,.0f} req/s  p50 {result.median_e2el_ms:7.2f}"
                        f" ms  p99 {result.p99_e2el_ms:8.2f} ms  failed {result.failed}",
                        flush=True,
                    )
    return runs


def section(results: dict[str, object], lines: list[str], command: str, note: str) -> str:
    """The ``## Gateway overhead`` section of docs/results/benchmarks.md."""
    info = results["machine"]
    assert isinstance(info, dict)
    return "\n".join(
        [
            report.HEADING,
            "",
            "Direct to an instant upstream vs through the bare relay (aiohttp server + client on "
            "uvloop, no features: the ceiling), fleetgate (one worker) and LiteLLM Proxy (one "
            "worker, installed in a throwaway virtualenv), all in the same run against the same "
            "upstream (`bench/overhead/upstream.py`, pre-encoded bodies; SSE is 8 chunks, a usage "
            "chunk and `[DONE]`). wrk with one thread, concurrency 1 and 64, JSON and SSE "
            "(`stream_options.include_usage`), medians over repetitions interleaved across "
            "targets. Resident memory is the gateway's process tree, sampled on the fresh "
            "process after each checkpoint of a count-bounded load (half JSON, half SSE, "
            "concurrency 64). Reproduce with `.venv/bin/python bench/overhead/run.py "
            "--write-docs`; raw runs go to `bench/results/overhead-<timestamp>.json`.",
            "",
            *([f"Note: {note}", ""] if note else []),
            f"- Date: {results['date']}",
            "- Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()),
            f"- Command: `{command}`",
            "",
            *lines,
        ]
    )


def summarise(
    args: argparse.Namespace,
    runs: dict[report.Cell, list[wrkrun.WrkResult]],
    names: list[str],
    mem: list[memory.MemorySample],
) -> tuple[dict[str, object], list[str]]:
    """Medians, ratios, checks; return the JSON-ready results and the report lines."""
    med = report.medians(runs)
    ratio = report.ratios(med, names)
    growth = memory.growth(mem)
    first, last = min(args.memory_requests), max(args.memory_requests)
    label = f"{args.memory_target} {first:,} -> {last:,} requests"
    checks = report.checks(ratio, args.modes, growth, label, baseline=BASELINE in names)
    lines = [*report.table(med, names), "", "Ratios:", ""]
    if BASELINE in names:
        lines[0:0] = [f"`{BASELINE}`: fleetgate from `{args.baseline_src}`.", ""]
    lines += [f"- {k}: {'-' if v is None else f'{v:.3g}'}" for k, v in ratio.items()]
    if mem:
        lines += ["", f"Resident memory of {args.memory_target} (process tree):", ""]
        lines += [f"- after {s.requests:,} requests: {s.rss_mib:.1f} MiB" for s in mem]
    lines += ["", "Targets (one gateway worker, every core feature on):", ""]
    lines += [f"- {c.render()}" for c in checks]
    results: dict[str, object] = {
        "medians": {"/".join(map(str, cell)): m for cell, m in med.items()},
        "runs": {"/".join(map(str, cell)): [r.__dict__ for r in rs] for cell, rs in runs.items()},
        "ratios": ratio,
        "memory": memory.to_json(mem),
        "rss_growth": growth,
        "checks": {c.name: {"value": c.value, "passed": c.passed} for c in checks},
    }
    return results, lines


def shown_args(argv: list[str] | None) -> list[str]:
    """The command-line arguments to print as the reproducing command, without ``--note``."""
    args, shown = list(sys.argv[1:] if argv is None else argv), []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--note":
            skip = True
        elif not arg.startswith("--note="):
            shown.append(arg)
    return shown


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    args = parse_args(argv)
    if args.nice is not None:  # this process, and wrk, which it starts in its own session
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(str(args.nice))
    command = shlex.join([".venv/bin/python", "bench/overhead/run.py", *shown_args(argv)])
    info = machine.describe(REPO)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetgate-bench-")))
        targets, skipped = start_targets(args, stack, work, info)
        names = [t.name for t in targets]
        mem: list[memory.MemorySample] = []
        mem_target = next((t for t in targets if t.name == args.memory_target), None)
        if not args.no_memory and mem_target is not None:
            # First, on the fresh process, so the checkpoints count from start-up.
            mem = memory.measure(mem_target, args.memory_requests, work, args.memory_max_s)
        runs = measure(args, targets, work)
        config = work / "fleetgate.yaml"
        fleetgate_config = config.read_text() if "fleetgate" in names else None
    results, lines = summarise(args, runs, names, mem)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    results.update(
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
        machine=info,
        command=command,
        skipped=skipped,
        fleetgate_config=fleetgate_config,
        options={k: str(v) for k, v in vars(args).items()},
    )
    for name, reason in skipped.items():
        lines.append(f"\n{name} skipped: {reason}")
    print("\n" + "\n".join(lines))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"overhead-{stamp}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nresults: {out}")
    if args.write_docs:
        report.update_docs(args.docs, section(results, lines, command, args.note))
        print(f"docs: {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
