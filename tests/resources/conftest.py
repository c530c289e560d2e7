"""The tenancy fixtures (a store on SQLite and on the real PostgreSQL), shared rather than
copied."""

from tests.tenancy.conftest import db_url

__all__ = ["db_url"]
