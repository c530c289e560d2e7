"""Durable state: SQLAlchemy tables and Alembic migrations for SQLite and PostgreSQL."""

from fleetgate.store.database import Database, database_url

__all__ = ["Database", "database_url"]
