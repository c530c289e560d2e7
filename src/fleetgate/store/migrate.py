"""Run the Alembic migrations shipped inside the package, without an alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["alembic_config", "upgrade_to_head"]

_LOCK_ID = 7_243_001  # pg advisory lock: one migrating process at a time


def alembic_config() -> Config:
    """An Alembic config pointing at ``fleetgate/store/migrations``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return cfg


def _upgrade(conn: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


async def upgrade_to_head(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            await conn.execute(text(f"SELECT pg_advisory_lock({_LOCK_ID})"))
            await conn.commit()
        try:
            await conn.run_sync(_upgrade)
            await conn.commit()
        finally:
            if postgres:
                await conn.execute(text(f"SELECT pg_advisory_unlock({_LOCK_ID})"))
                await conn.commit()
