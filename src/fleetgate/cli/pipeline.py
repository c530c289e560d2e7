"""``fleetgate pipeline status|start``: release pipelines through the admin API (master key).

``status`` without a version lists every run (one line each: the step it is at); with a
version it prints the run's timeline, one line per step with its duration.

Example::

    fleetgate pipeline start chat v8
    fleetgate pipeline status
    fleetgate pipeline status chat v8
"""

from __future__ import annotations

import argparse
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render

__all__ = ["register", "run", "timeline"]

_BASE = "/admin/pipelines"
_COLUMNS = ("model", "version", "alias", "status", "step", "verdict", "reason")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("pipeline", help="release pipelines")
    actions = parser.add_subparsers(dest="action", required=True)
    start = client_command(actions, "start", help="start the pipeline of a registered version")
    start.add_argument("model")
    start.add_argument("version")
    status = client_command(actions, "status", help="every run, or one run's steps")
    status.add_argument("model", nargs="?")
    status.add_argument("version", nargs="?")
    parser.set_defaults(func=run)


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    last = run["steps"][-1] if run["steps"] else None
    step = f"{last['name']} ({last['status']})" if last else "-"
    return {**run, "step": step, "verdict": (run.get("gate") or {}).get("verdict")}


def timeline(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per step: name, status, seconds it took (so far), what it found."""
    rows = []
    for step in run["steps"]:
        end = step.get("finished_ms") or run["updated_ms"]
        detail = {k: v for k, v in step.get("detail", {}).items() if k not in ("runs",)}
        rows.append({"step": step["name"], "status": step["status"],
                     "seconds": round((end - step["started_ms"]) / 1000, 2),
                     "by": step.get("by"), "detail": detail or None})  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> int:
    if args.action == "start":
        body = {"model": args.model, "version": args.version}
        print(render([_summary(call(args, "POST", _BASE, body))], args.output,
                     None if args.output == "json" else _COLUMNS))  # fmt: skip
        return 0
    if args.version is None:
        query = f"?model={args.model}" if args.model else ""
        rows = [_summary(r) for r in call(args, "GET", _BASE + query)["data"]]
        print(render(rows, args.output, None if args.output == "json" else _COLUMNS))
        return 0
    one = call(args, "GET", f"{_BASE}/{args.model}/{args.version}")
    if args.output == "json":
        print(render([one], "json"))
        return 0
    print(render([_summary(one)], args.output, _COLUMNS))
    print(render(timeline(one), args.output, ("step", "status", "seconds", "by", "detail")))
    return 0
