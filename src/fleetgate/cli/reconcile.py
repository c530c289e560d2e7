"""``fleetgate reconcile BILL``: the gateway's spend against a provider's bill, per day and model.

Example::

    fleetgate reconcile openai-costs.json --provider openai --config fleetgate.yaml
    fleetgate reconcile cost_report.json --provider anthropic --config fleetgate.yaml -o json

The bill formats and the rule are in :mod:`fleetgate.cost.reconcile`. Exit status 1 when a day
is flagged (a scheduled job can alert on it), 0 when everything agrees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from fleetgate.config.loader import load_config
from fleetgate.config.settings import Settings
from fleetgate.cost.reconcile import (
    BILLING_HOSTS,
    Difference,
    deployment_models,
    gateway_spend,
    read_bill,
)
from fleetgate.cost.reconcile import reconcile as compare
from fleetgate.errors import ConfigError, FleetgateError
from fleetgate.store.database import Database

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "reconcile",
        help="compare the gateway's spend with a provider's bill, per day and model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bill", type=Path, help="the provider's export (JSON, JSON lines or CSV)")
    p.add_argument("--provider", required=True, choices=sorted(BILLING_HOSTS))
    p.add_argument("--config", type=Path, required=True, help="the gateway's config (deployments)")
    p.add_argument("--database-url", help="default: FLEETGATE_DATABASE_URL, else the data dir's")
    p.add_argument("--data-dir", type=Path)
    p.add_argument("--tolerance", type=float, default=0.02, help="share of the larger (0.02)")
    p.add_argument("--min-usd", type=float, default=0.01, help="ignore smaller differences")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _row(d: Difference) -> dict[str, Any]:
    return {
        "day": d.day.isoformat(),
        "model": d.model,
        "gateway_usd": d.gateway_usd,
        "bill_usd": d.bill_usd,
        "diff_usd": round(d.diff_usd, 6),
        "flagged": d.flagged,
    }


async def _run(args: argparse.Namespace) -> list[Difference]:
    if not 0 <= args.tolerance < 1 or args.min_usd < 0:
        raise ConfigError("--tolerance is a share in [0, 1) and --min-usd >= 0")
    bill = read_bill(args.bill)
    if not bill:
        return []
    models = deployment_models(load_config(args.config), args.provider)
    settings = Settings.from_env(database_url=args.database_url, data_dir=args.data_dir)
    db = Database.from_url(settings.database_url, settings.data_dir)
    try:
        days = [line.day for line in bill]
        ours = await gateway_spend(db, models, min(days), max(days))
    finally:
        await db.aclose()
    return compare(ours, bill, tolerance=args.tolerance, min_usd=args.min_usd)


def run(args: argparse.Namespace) -> int:
    try:
        rows = asyncio.run(_run(args))
    except FleetgateError as exc:
        print(f"fleetgate reconcile: {exc.message}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps([_row(d) for d in rows], indent=2))
    else:
        print(f"{'day':<11} {'model':<32} {'gateway $':>12} {'bill $':>12} {'diff $':>11}")
        for d in rows:
            mark = "  <-- differs" if d.flagged else ""
            print(f"{d.day.isoformat():<11} {d.model[:32]:<32} {d.gateway_usd:>12.4f} "
                  f"{d.bill_usd:>12.4f} {d.diff_usd:>+11.4f}{mark}")  # fmt: skip
        flagged = sum(d.flagged for d in rows)
        print(f"{flagged} of {len(rows)} day/model rows differ beyond the tolerance")
    return 1 if any(d.flagged for d in rows) else 0
