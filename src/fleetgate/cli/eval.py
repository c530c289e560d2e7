"""``fleetgate eval run --suite FILE --target ALIAS@VERSION``: judge a registry version
through the gateway, store the per-item results on the version, compare with production.

Steps: run the suite against ``ALIAS@VERSION`` (the registry's pinned alias of that version);
unless it *is* the baseline, pair it item by item with the baseline (the version at
production, or ``--baseline``) on the same items: the baseline's stored run of this suite (same
digest) when it has one, else a run of ``ALIAS@<baseline>`` now, which is stored too (or always
now with ``--rerun-baseline``); a bootstrap confidence interval per kind. Then store the run
on the version and print the metrics and the version's gate.

Example::

    fleetgate eval run --suite golden.jsonl --target chat@v7 --url http://127.0.0.1:4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render
from fleetgate.errors import ConfigError
from fleetgate.releases.runner import EvalRunner, Outcome, compare, summarise
from fleetgate.releases.suites import Suite, load_suite

__all__ = ["register", "run"]

_BASE = "/admin/registry/models"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("eval", help="evaluate registry versions")
    actions = parser.add_subparsers(dest="action", required=True)
    go = client_command(
        actions, "run", help="run a suite against ALIAS@VERSION through the gateway"
    )
    go.add_argument("--suite", type=Path, required=True, help="a JSONL suite (docs/releases.md)")
    go.add_argument("--target", required=True, help="ALIAS@VERSION, e.g. chat@v7")
    go.add_argument("--model", help="the registry model (default: the alias)")
    go.add_argument("--baseline", help="the version to compare with (default: production; "
                    "'none': no comparison)")  # fmt: skip
    go.add_argument("--concurrency", type=int, default=8)
    go.add_argument("--judge", help="the judge model of 'judge' items that name none")
    go.add_argument("--judge-url", help="an OpenAI-compatible /v1 URL for the judge "
                    "(default: the gateway)")  # fmt: skip
    go.add_argument("--judge-key", help="its API key (default: --key)")
    go.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    go.add_argument("--no-store", action="store_true", help="print only; store nothing")
    go.add_argument(
        "--rerun-baseline",
        action="store_true",
        help="run the baseline now even if it has a stored run of this suite",
    )
    harness = client_command(
        actions,
        "lm-eval",
        help="run lm-eval-harness tasks against ALIAS@VERSION through the gateway",
    )
    harness.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    harness.add_argument("--target", required=True, help="ALIAS@VERSION, e.g. chat@v7")
    harness.add_argument("--model", help="the registry model (default: the alias)")
    harness.add_argument("--include-path", type=Path, help="a folder of task YAML files")
    harness.add_argument("--limit", type=int, help="samples per task")
    harness.add_argument("--num-fewshot", type=int)
    harness.add_argument("--concurrency", type=int, default=8)
    harness.add_argument("--no-store", action="store_true", help="print only; store nothing")
    perf = client_command(
        actions, "perf", help="the performance leg: fleetgate bench's load on ALIAS@VERSION"
    )
    perf.add_argument("--target", required=True, help="ALIAS@VERSION, e.g. chat@v7")
    perf.add_argument("--model", help="the registry model (default: the alias)")
    perf.add_argument("--baseline", help="the version to compare with (default: production; "
                      "'none': no comparison)")  # fmt: skip
    perf.add_argument("--rate", type=float, default=10.0, help="requests per second")
    perf.add_argument("--requests", type=int, default=200)
    perf.add_argument("--input-len", default="fixed:128", help="a length distribution")
    perf.add_argument("--output-len", default="fixed:32")
    perf.add_argument("--seed", type=int, default=0)
    perf.add_argument("--no-store", action="store_true", help="print only; store nothing")
    parser.set_defaults(func=run)


def run_perf(args: argparse.Namespace) -> int:
    """``fleetgate eval perf``: the load on the version (and on the baseline, unless it has a
    stored run of the same load), stored with the ratios; then the version's gate."""
    from fleetgate.releases.perf import perf_run

    if not args.key:
        raise ConfigError("no key: pass --key or set FLEETGATE_MASTER_KEY")
    alias, version = _target(args.target)
    model = args.model or alias
    load = {"rate": args.rate, "requests": args.requests, "input_len": args.input_len,
            "output_len": args.output_len, "seed": args.seed}  # fmt: skip
    mine = perf_run(args.url, args.key, args.target, **load)
    baseline = _baseline(args, model, version)
    path = f"{_BASE}/{model}/versions"
    if baseline is not None:
        stored = _stored(args, model, baseline, mine["suite_digest"])
        theirs = stored or perf_run(args.url, args.key, f"{alias}@{baseline}", **load)
        if stored is None and not args.no_store:
            call(args, "POST", f"{path}/{baseline}/evals", theirs)
        mine["comparison"] = {
            "baseline_version": baseline,
            "ratios": {k: v / theirs["metrics"][k] for k, v in mine["metrics"].items()
                       if theirs["metrics"].get(k)},
        }  # fmt: skip
    rows = [{"metric": k, "value": round(v, 3),
             "ratio": round((mine["comparison"] or {}).get("ratios", {}).get(k, 0.0), 3) or None}
            for k, v in sorted(mine["metrics"].items())]  # fmt: skip
    gate = None
    if not args.no_store:
        mine["run"] = call(args, "POST", f"{path}/{version}/evals", mine)["id"]
        gate = call(args, "GET", f"{path}/{version}/gate")
    if args.output == "json":
        print(json.dumps({**mine, "gate": gate}, indent=2, sort_keys=True))
        return 0
    print(f"{mine['suite']}")
    print(render(rows, args.output, ("metric", "value", "ratio")))
    if gate is not None:
        print(f"gate: {gate['verdict']}" + (f" ({gate['reason']})" if gate["reason"] else ""))
    return 0


def run_lm_eval(args: argparse.Namespace) -> int:
    """``fleetgate eval lm-eval``: each task's run stored on the version, and its gate."""
    from fleetgate.releases.lmeval import run_tasks, to_records

    if not args.key:
        raise ConfigError("no key: pass --key or set FLEETGATE_MASTER_KEY")
    alias, version = _target(args.target)
    model = args.model or alias
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    results = run_tasks(
        args.url, args.key, args.target, tasks, include_path=args.include_path,
        limit=args.limit, num_concurrent=args.concurrency, num_fewshot=args.num_fewshot,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    for record in to_records(results, limit=args.limit):
        if not args.no_store:
            path = f"{_BASE}/{model}/versions/{version}/evals"
            record["run"] = call(args, "POST", path, record)["id"]
        rows.extend(
            {"suite": record["suite"], "metric": k, "value": round(v, 4)}
            for k, v in sorted(record["metrics"].items())
        )
    print(render(rows, args.output, ("suite", "metric", "value")))
    if not args.no_store:
        gate = call(args, "GET", f"{_BASE}/{model}/versions/{version}/gate")
        print(f"gate: {gate['verdict']}" + (f" ({gate['reason']})" if gate["reason"] else ""))
    return 0


def _target(text: str) -> tuple[str, str]:
    alias, sep, version = text.partition("@")
    if not sep or not alias or not version:
        raise ConfigError(f"--target must be ALIAS@VERSION, got {text!r}")
    return alias, version


def _record(suite: Suite, outcomes: list[Outcome], comparison: Any) -> dict[str, Any]:
    return {
        "suite": suite.name, "suite_digest": suite.digest, "metrics": summarise(outcomes),
        "comparison": comparison, "items": [o.to_dict() for o in outcomes],
    }  # fmt: skip


async def _runs(
    args: argparse.Namespace, suite: Suite, alias: str, version: str, baseline: str | None
) -> tuple[list[Outcome], list[Outcome] | None]:
    runner = EvalRunner(
        args.url.rstrip("/") + "/v1", args.key, concurrency=args.concurrency,
        judge=args.judge, judge_url=args.judge_url, judge_key=args.judge_key,
    )  # fmt: skip
    try:
        mine = await runner.run(suite, f"{alias}@{version}")
        theirs = await runner.run(suite, f"{alias}@{baseline}") if baseline else None
    finally:
        await runner.aclose()
    return mine, theirs


def _stored(args: argparse.Namespace, model: str, version: str, digest: str) -> Any:
    """The version's newest stored run of the suite with ``digest`` (with items), or None."""
    runs = call(args, "GET", f"{_BASE}/{model}/versions/{version}/evals")["data"]
    found = next((r for r in runs if r["suite_digest"] == digest), None)
    return None if found is None else call(args, "GET", f"/admin/registry/evals/{found['id']}")


def _outcomes(run: Any) -> list[Outcome]:
    fields = ("item_id", "kind", "score", "passed", "output", "ttft_ms", "error")
    return [Outcome(**{f: item.get(f) for f in fields}) for item in run["items"]]


def _baseline(args: argparse.Namespace, model: str, version: str) -> str | None:
    if args.baseline == "none":
        return None
    chosen = args.baseline or call(args, "GET", f"{_BASE}/{model}")["stages"].get("production")
    return None if chosen in (None, version) else str(chosen)


def run(args: argparse.Namespace) -> int:
    if args.action == "lm-eval":
        return run_lm_eval(args)
    if args.action == "perf":
        return run_perf(args)
    if not args.key:
        raise ConfigError("no key: pass --key or set FLEETGATE_MASTER_KEY")
    suite = load_suite(args.suite)
    alias, version = _target(args.target)
    model = args.model or alias
    baseline = _baseline(args, model, version)
    stored = None
    if baseline is not None and not args.rerun_baseline:
        stored = _stored(args, model, baseline, suite.digest)
    mine, theirs = asyncio.run(_runs(args, suite, alias, version, None if stored else baseline))
    if stored is not None:
        theirs = _outcomes(stored)
    kinds: dict[str, dict[str, float]] = {}
    comparison: dict[str, Any] | None = None
    if theirs is not None:
        kinds = compare(mine, theirs, seed=args.seed)
        comparison = {"baseline_version": baseline, "kinds": kinds}
    record: dict[str, Any] = _record(suite, mine, comparison)
    gate: dict[str, Any] | None = None
    if not args.no_store:
        path = f"{_BASE}/{model}/versions"
        if theirs is not None and baseline is not None and stored is None:
            if _stored(args, model, baseline, suite.digest) is None:
                call(args, "POST", f"{path}/{baseline}/evals", _record(suite, theirs, None))
        record["run"] = call(args, "POST", f"{path}/{version}/evals", record)["id"]
        gate = call(args, "GET", f"{path}/{version}/gate")
    if args.output == "json":
        summary = {k: v for k, v in record.items() if k != "items"}
        print(json.dumps({**summary, "gate": gate}, indent=2, sort_keys=True))
        return 0
    rows = [
        {"metric": name, "value": round(value, 4),
         **({k: round(v, 4) for k, v in kinds[name].items() if k != "n"} if name in kinds else {})}
        for name, value in sorted(record["metrics"].items())
    ]  # fmt: skip
    print(render(rows, args.output, ("metric", "value", "baseline", "delta", "ci_low", "ci_high")))
    if gate is not None:
        print(f"gate: {gate['verdict']}" + (f" ({gate['reason']})" if gate["reason"] else ""))
    return 0
