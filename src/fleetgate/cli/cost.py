"""``fleetgate cost``: GPU utilisation, idle GPU-hours and their cost per pool and per team, and
what to reclaim (the gateway's ``GET /admin/cost``; needs ``extensions.cost`` in its config).

Example::

    fleetgate cost --hours 24            # master key: pools, teams, recommendations
    fleetgate cost -o json               # the whole report
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from fleetgate.cli.admin_client import add_client_args, call, render

__all__ = ["register", "run"]

POOL_COLUMNS = ["pool", "gpus", "utilisation", "gpu_hours", "idle_gpu_hours", "cost_usd",
                "idle_cost_usd", "idle_cost_per_month_usd", "engine_idle_fraction"]  # fmt: skip
TEAM_COLUMNS = ["team_name", "team", "pool", "tokens", "share", "cost_usd", "idle_cost_usd"]
REC_COLUMNS = ["pool", "action", "gpus", "needed_gpus", "reclaim_gpus", "savings_per_month_usd",
               "reason"]  # fmt: skip


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cost", help="GPU cost: utilisation, idle GPU-hours per pool and team, reclaim"
    )
    parser.add_argument("--hours", type=float, help="window (default: the config's window_h)")
    add_client_args(parser)
    parser.set_defaults(func=run)


def _fmt(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        row = dict(r)
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = f"{v:.1%}" if k in ("utilisation", "share", "engine_idle_fraction") \
                    else f"{v:,.2f}"  # fmt: skip
        out.append(row)
    return out


def run(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"hours": args.hours} if args.hours else {})
    data = call(args, "GET", "/admin/cost" + (f"?{query}" if query else ""))
    if args.output == "json":
        print(render([data], "json"))
        return 0
    parts = []
    if "pools" in data:
        parts.append(render(_fmt(data["pools"]), args.output, POOL_COLUMNS))
    parts.append(render(_fmt(data["teams"]), args.output, TEAM_COLUMNS))
    if data.get("teams_note"):
        parts.append(data["teams_note"])
    if "recommendations" in data:
        recs = data["recommendations"]
        parts.append(render(_fmt(recs), args.output, REC_COLUMNS) if recs else "nothing to reclaim")
    print("\n\n".join(parts))
    return 0
