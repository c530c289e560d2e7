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
    add_client_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = {"group_by": args.group_by, "since": args.since, "until": args.until,
              "team": args.team}  # fmt: skip
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
    data = call(args, "GET", f"/admin/spend?{query}")
    groups = data["group_by"]
    columns = [*groups, "spend_usd", "requests", "input_tokens", "output_tokens"]
    rows = data["data"]
    if args.output != "json":  # exact dollars, never 2.94e-05
        rows = [{**r, "spend_usd": _usd(r)} for r in rows]
    print(render(rows, args.output, None if args.output == "json" else columns))
    return 0


def _usd(row: dict[str, Any]) -> str:
    nusd = row.get("spend_nusd")
    value = Decimal(nusd) / NANO if isinstance(nusd, int) else Decimal(str(row["spend_usd"]))
    whole, _, fraction = f"{value:.9f}".partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"  # cents at least, nano at most
