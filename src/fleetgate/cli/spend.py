"""``fleetgate spend``: the spend report, grouped by team, alias, key or tag."""

from __future__ import annotations

import argparse
import urllib.parse
from decimal import Decimal
from typing import Any

from fleetgate.cli.admin_client import add_client_args, call, render
from fleetgate.tenancy.money import NANO

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("spend", help="spend report")
    parser.add_argument(
        "--group-by",
        default="team",
        help="comma list of team, alias, key, tag, deployment, version",
    )
    parser.add_argument("--since", help="ISO-8601 time or epoch seconds")
    parser.add_argument("--until", help="ISO-8601 time or epoch seconds")
    parser.add_argument("--team", help="only this team (id or name)")
    parser.add_argument(
        "--ids", action="store_true", help="show team and key ids beside their names"
    )
    add_client_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = {"group_by": args.group_by, "since": args.since, "until": args.until,
              "team": args.team}  # fmt: skip
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
    data = call(args, "GET", f"/admin/spend?{query}")
    groups = data["group_by"]
    rows = data["data"]
    if args.output == "json":
        print(render(rows, "json"))
        return 0
    # people think in names: the team and key columns show a team's name, a key's user or
    # hint ("master key" for its own traffic); --ids adds their ids beside them
    named = [g for g in ("team", "key") if g in groups]
    columns = []
    for g in groups:
        columns.append(g)
        if g in named and args.ids:
            columns.append(f"{g}_id")
    columns += ["spend_usd", "requests", "input_tokens", "output_tokens"]
    out = []
    for r in rows:
        row = {**r, "spend_usd": _usd(r)}  # exact dollars, never 2.94e-05
        for g in named:
            row[f"{g}_id"] = r.get(g) or ""
            row[g] = r.get(f"{g}_name") or r.get(g) or ""
        out.append(row)
    print(render(out, args.output, columns))
    return 0


def _usd(row: dict[str, Any]) -> str:
    nusd = row.get("spend_nusd")
    value = Decimal(nusd) / NANO if isinstance(nusd, int) else Decimal(str(row["spend_usd"]))
    whole, _, fraction = f"{value:.9f}".partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"  # cents at least, nano at most
