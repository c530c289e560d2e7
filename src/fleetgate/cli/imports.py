"""``fleetgate import litellm-config FILE`` and ``fleetgate import litellm-db URL``.

``litellm-config`` writes a fleetgate config (stdout, or ``--out FILE``) and prints what has no
equivalent on stderr. ``litellm-db`` copies teams, keys, budgets and spend history into the
gateway's database (``--database-url`` or ``FLEETGATE_DATABASE_URL``, else SQLite under the
data directory); running it again updates what it wrote and adds only new spend, never
loosening what fleetgate holds (`fleetgate.importers.reimport`), and tells running gateways
through Redis (``--redis-url`` or ``FLEETGATE_REDIS_URL``) so every replica sees new keys at once.
Bad input (a missing file, not a LiteLLM config, an unreachable database) exits with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from fleetgate.app import MIGRATIONS
from fleetgate.config.loader import load_config, read_yaml
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.importers.litellm_config import convert_litellm_config
from fleetgate.importers.litellm_db import import_litellm_db
from fleetgate.store.database import Database

__all__ = ["register", "run_config", "run_db"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import", help="import from another gateway (LiteLLM)"
    )
    inner = parser.add_subparsers(dest="import_command", metavar="SOURCE", required=True)
    cfg = inner.add_parser("litellm-config", help="a LiteLLM proxy config -> a fleetgate config")
    cfg.add_argument("file", type=Path)
    cfg.add_argument("--out", type=Path, default=None, help="write here (default: stdout)")
    cfg.set_defaults(func=run_config)
    db = inner.add_parser("litellm-db", help="LiteLLM's teams, keys, budgets and spend")
    db.add_argument("url", help="LiteLLM's DATABASE_URL (postgresql://...)")
    db.add_argument("--database-url", default=None, help="default: FLEETGATE_DATABASE_URL")
    db.add_argument("--data-dir", type=Path, default=None, help="where SQLite lives")
    db.add_argument("--no-spend", action="store_true", help="skip the spend history")
    db.add_argument(
        "--redis-url",
        default=None,
        help="tell running gateways at once (default: FLEETGATE_REDIS_URL)",
    )
    db.add_argument("--redis-prefix", default=None,
                    help="the gateways' tenancy.redis_prefix (default: FLEETGATE_CONFIG's, "
                         "else fg:)")  # fmt: skip
    db.set_defaults(func=run_db)


def run_config(args: argparse.Namespace) -> int:
    result = convert_litellm_config(read_yaml(args.file))
    if args.out is not None:
        args.out.write_text(result.yaml(), encoding="utf-8")
        print(f"wrote {args.out} ({len(result.config['models'])} aliases)", file=sys.stderr)
    else:
        sys.stdout.write(result.yaml())
    if result.env:
        print("environment variables it reads: " + ", ".join(result.env), file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def run_db(args: argparse.Namespace) -> int:
    settings = Settings.from_env(
        database_url=args.database_url, data_dir=args.data_dir, redis_url=args.redis_url
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    prefix = args.redis_prefix or _redis_prefix(settings)
    report = asyncio.run(_import(args.url, settings, not args.no_spend, prefix))
    print(report.summary())
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _redis_prefix(settings: Settings) -> str:
    """The gateways' ``tenancy.redis_prefix``, from their config file when one is named."""
    if settings.config_path is None or settings.redis_url is None:
        return "fg:"
    try:
        return load_config(settings.config_path).tenancy.redis_prefix
    except ConfigError as exc:
        print(f"note: {exc.message}; announcing on prefix fg:", file=sys.stderr)
        return "fg:"


async def _import(url: str, settings: Settings, spend: bool, prefix: str) -> Any:
    db = Database.from_url(settings.database_url, settings.data_dir, migrations=MIGRATIONS)
    try:
        return await import_litellm_db(
            url, db, spend_history=spend, redis_url=settings.redis_url, redis_prefix=prefix
        )
    finally:
        await db.aclose()
