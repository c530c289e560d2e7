"""``fleetgate db migrate``: bring the database schema to the newest Alembic revision.

The gateway migrates on start as well; this command exists so a deployment can run the
migration once, before the rollout (the Kubernetes migration Job does), instead of racing N
replicas. The database is ``FLEETGATE_DATABASE_URL`` (or ``--database-url``), else the SQLite
file under the data directory.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from fleetgate.app import MIGRATIONS
from fleetgate.config.settings import Settings
from fleetgate.store.database import Database

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("db", help="database schema")
    actions = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    migrate = actions.add_parser("migrate", help="upgrade the schema to the newest revision")
    migrate.add_argument("--database-url", default=None, help="default: FLEETGATE_DATABASE_URL")
    migrate.add_argument("--data-dir", type=Path, default=None, help="where SQLite lives")
    migrate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(database_url=args.database_url, data_dir=args.data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(
        _migrate(Database.from_url(settings.database_url, settings.data_dir, migrations=MIGRATIONS))
    )
    print("database schema is at the newest revision")
    return 0


async def _migrate(db: Database) -> None:
    try:
        await db.migrate()
    finally:
        await db.aclose()
