"""``fleetgate insights``: business metrics and the key hygiene report, from the admin API.

fleetgate insights business --start 2026-11-01 --end 2026-11-30 [--team ID] [-o json]
fleetgate insights keys [--days 30] [--team ID]
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render

__all__ = ["register", "run_business", "run_keys"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "insights", help="business metrics (DAU/MAU, retention, conversion) and the key report"
    )
    inner = parser.add_subparsers(dest="insights_command", metavar="REPORT", required=True)
    business = client_command(inner, "business", help="DAU/MAU, retention, plans, conversion")
    business.add_argument("--start", help="first UTC day, YYYY-MM-DD (default: end - 29)")
    business.add_argument("--end", help="last UTC day, YYYY-MM-DD (default: today)")
    business.add_argument("--team", help="only this team (id)")
    business.set_defaults(func=run_business)
    keys = client_command(inner, "keys", help="keys unused, never expiring or broader than used")
    keys.add_argument("--days", type=int, help="unused for this many days (config default)")
    keys.add_argument("--team", help="only this team (id)")
    keys.set_defaults(func=run_keys)


def _query(**params: Any) -> str:
    return urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def run_business(args: argparse.Namespace) -> int:
    data = call(args, "GET", "/admin/insights/business?" + _query(
        start=args.start, end=args.end, team=args.team))  # fmt: skip
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    retention, conversion = data["retention"], data["conversion"]
    print(f"{data['start']} .. {data['end']}  active users {data['active_users']}  "
          f"MAU {data['mau']}  stickiness {_pct(data['stickiness'])}")  # fmt: skip
    print(f"retention d1 {_pct(retention['d1'])}  d7 {_pct(retention['d7'])}  "
          f"d30 {_pct(retention['d30'])}  conversion {conversion['converted']}/"
          f"{conversion['unpaid_users']} ({_pct(conversion['rate'])})")  # fmt: skip
    rows = [
        {"plan": name, "active_users": p["active_users"], "requests": p["requests"],
         "tokens": p["input_tokens"] + p["output_tokens"], "cost_usd": f"{p['cost_usd']:.4f}",
         "revenue_usd": "" if p["revenue_usd"] is None else f"{p['revenue_usd']:.2f}"}
        for name, p in sorted(data["plans"].items())
    ]  # fmt: skip
    print(render(rows, args.output, ["plan", "active_users", "requests", "tokens", "cost_usd",
                                     "revenue_usd"]))  # fmt: skip
    return 0


def run_keys(args: argparse.Namespace) -> int:
    data = call(args, "GET", "/admin/insights/keys?" + _query(days=args.days, team=args.team))
    rows = [
        {"id": k["id"], "key_hint": k["key_hint"], "team_id": k["team_id"],
         "findings": ",".join(k["findings"]),
         "suggested_aliases": ",".join(k["suggested_aliases"] or [])}
        for k in data["data"]
    ]  # fmt: skip
    if args.output == "json":
        print(json.dumps(data["data"], indent=2, sort_keys=True))
    else:
        print(render(rows, args.output, ["id", "key_hint", "team_id", "findings",
                                         "suggested_aliases"]))  # fmt: skip
    return 0
