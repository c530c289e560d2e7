"""``fleetgate audit``: the newest admin actions or request audit rows (admin API)."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from fleetgate.cli.admin_client import add_client_args, call, render

__all__ = ["register", "run"]

_COLUMNS = {
    "admin": ("id", "created_ms", "actor_key_id", "team_id", "action", "target"),
    "request": ("request_id", "created_ms", "key_id", "team_id", "alias", "decision", "status"),
}


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="read the audit log")
    parser.add_argument("--kind", choices=("admin", "request"), default="admin")
    parser.add_argument("--limit", type=int, default=50, help="newest rows (1-1000)")
    add_client_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"kind": args.kind, "limit": args.limit})
    rows = call(args, "GET", f"/admin/audit?{query}")["data"]
    print(render(rows, args.output, None if args.output == "json" else _COLUMNS[args.kind]))
    return 0
