"""Run the Alembic migrations shipped inside the packages, without an alembic.ini.

The revisions live with the tables they create: the ground floor's in
``store/migrations/versions`` (`GROUND_FLOOR`), each feature's in the folders its class names
(``migrations``, collected by ``fleetgate.app``); the store imports no feature, so the caller
passes those folders in. Alembic reads them as one script directory: the built-in revisions
0001..0012 are one linear history spread over several folders, and a feature that adds tables
later ships its own branch (``branch_labels``, ``depends_on``) in its own folder. The runner
upgrades to ``heads``, every branch's newest revision.

Example::

    await upgrade_to_heads(db.engine, [Path(".../tenancy/migrations"), ...])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["GROUND_FLOOR", "alembic_config", "upgrade_to_heads", "version_locations"]

_LOCK_ID = 7_243_001  # pg advisory lock: one migrating process at a time
_SCRIPTS = Path(__file__).parent / "migrations"  # env.py and the revision template
GROUND_FLOOR = _SCRIPTS / "versions"
"""The ground floor's revisions (the shared state every replica agrees on)."""


def version_locations(locations: Sequence[Path]) -> list[Path]:
    """The ground floor's folder, then ``locations`` (each once, in order, absolute)."""
    seen: dict[Path, None] = {GROUND_FLOOR.resolve(): None}
    for location in locations:
        path = Path(location).resolve()
        if not path.is_dir():
            raise ValueError(f"migration folder {path} does not exist")
        seen.setdefault(path, None)
    return list(seen)


def alembic_config(locations: Sequence[Path]) -> Config:
    """An Alembic config over ``store/migrations`` and the revision folders ``locations``
    (the features'; the ground floor's is always included)."""
    cfg = Config()
    cfg.set_main_option("script_location", _escape(_SCRIPTS))
    cfg.set_main_option("path_separator", "os")
    joined = os.pathsep.join(_escape(p) for p in version_locations(locations))
    cfg.set_main_option("version_locations", joined)
    return cfg


def _escape(path: Path) -> str:
    return str(path).replace("%", "%%")  # the config parser interpolates %


def _upgrade(conn: Connection, locations: Sequence[Path]) -> None:
    cfg = alembic_config(locations)
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "heads")


async def upgrade_to_heads(engine: AsyncEngine, locations: Sequence[Path]) -> None:
    """Bring the schema to the newest revision of every branch in ``locations`` (plus the
    ground floor's); safe with several processes at once (PostgreSQL: an advisory lock)."""
    async with engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            await conn.execute(text(f"SELECT pg_advisory_lock({_LOCK_ID})"))
            await conn.commit()
        try:
            await conn.run_sync(_upgrade, locations)
            await conn.commit()
        finally:
            if postgres:
                await conn.execute(text(f"SELECT pg_advisory_unlock({_LOCK_ID})"))
                await conn.commit()
