"""``fleetgate keys create|list|revoke``: manage virtual keys through the admin API."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render

__all__ = ["register", "run"]

_COLUMNS = ("id", "hint", "team_id", "role", "aliases", "rpm", "tpm", "max_budget_usd", "revoked")


def _tag(value: str) -> tuple[str, str]:
    name, sep, tag_value = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("tags look like name=value")
    return name, tag_value


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("keys", help="create, list, revoke keys")
    actions = parser.add_subparsers(dest="action", required=True)
    create = client_command(actions, "create", help="create a key (shown once)")
    create.add_argument("--team", required=True, help="team id or name")
    create.add_argument("--alias", action="append", dest="aliases", help="allowed alias")
    create.add_argument("--role", choices=("user", "team_admin"), default="user")
    create.add_argument("--rpm", type=int)
    create.add_argument("--tpm", type=int)
    create.add_argument("--max-parallel", type=int)
    create.add_argument("--max-budget-usd", type=float)
    create.add_argument("--budget-period", choices=("daily", "weekly", "monthly", "total"))
    create.add_argument("--tag", action="append", type=_tag, default=[], help="name=value")
    create.add_argument("--expires-at", help="ISO-8601 time or epoch seconds")
    listing = client_command(actions, "list", help="list keys")
    listing.add_argument("--team")
    revoke = client_command(actions, "revoke", help="revoke a key")
    revoke.add_argument("key_id")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    columns: tuple[str, ...] | None = _COLUMNS
    if args.action == "create":
        body = {
            "team": args.team, "aliases": args.aliases, "role": args.role, "rpm": args.rpm,
            "tpm": args.tpm, "max_parallel": args.max_parallel,
            "max_budget_usd": args.max_budget_usd, "budget_period": args.budget_period,
            "tags": dict(args.tag), "expires_at": args.expires_at,
        }  # fmt: skip
        rows = [call(args, "POST", "/admin/keys", body)]
        columns = ("id", "key", "team_id", "hint")
    elif args.action == "revoke":
        rows = [call(args, "DELETE", f"/admin/keys/{args.key_id}")]
        columns = ("id", "revoked")
    else:
        query = "?" + urllib.parse.urlencode({"team": args.team}) if args.team else ""
        rows = call(args, "GET", f"/admin/keys{query}")["data"]
    print(render(rows, args.output, None if args.output == "json" else columns))
    return 0
