"""``fleetgate spend``: the spend report, grouped by team, alias, key or tag."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from fleetgate.cli.admin_client import add_client_args, call, render

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("spend", help="spend report")
    parser.add_argument("--group-by", default="team", help="comma list: team,alias,key,tag")
    parser.add_argument("--since", help="ISO-8601 time or epoch seconds")
    parser.add_argument("--until", help="ISO-8601 time or epoch seconds")
    parser.add_argument("--team", help="only this team (id)")
    add_client_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = {"group_by": args.group_by, "since": args.since, "until": args.until,
              "team": args.team}  # fmt: skip
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
    data = call(args, "GET", f"/admin/spend?{query}")
    groups = data["group_by"]
    columns = [*groups, "spend_usd", "requests", "input_tokens", "output_tokens"]
    print(render(data["data"], args.output, None if args.output == "json" else columns))
    return 0
