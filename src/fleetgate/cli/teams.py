"""``fleetgate teams create|list``: manage teams through the admin API."""

from __future__ import annotations

import argparse
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render

__all__ = ["register", "run"]

_COLUMNS = ("id", "name", "rpm", "tpm", "max_parallel", "max_budget_usd", "budget_period")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("teams", help="create and list teams")
    actions = parser.add_subparsers(dest="action", required=True)
    create = client_command(actions, "create", help="create a team")
    create.add_argument("name")
    create.add_argument("--rpm", type=int)
    create.add_argument("--tpm", type=int)
    create.add_argument("--max-parallel", type=int)
    create.add_argument("--max-budget-usd", type=float)
    create.add_argument("--budget-period", choices=("daily", "weekly", "monthly", "total"))
    create.add_argument("--log-payloads", action="store_true", help="audit full prompts")
    client_command(actions, "list", help="list teams")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "create":
        body = {
            "name": args.name,
            "rpm": args.rpm,
            "tpm": args.tpm,
            "max_parallel": args.max_parallel,
            "max_budget_usd": args.max_budget_usd,
            "budget_period": args.budget_period,
            "log_payloads": args.log_payloads,
        }
        rows = [call(args, "POST", "/admin/teams", body)]
    else:
        rows = call(args, "GET", "/admin/teams")["data"]
    print(render(rows, args.output, None if args.output == "json" else _COLUMNS))
    return 0
