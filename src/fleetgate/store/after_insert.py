"""`AfterInsert`: a statement a bulk insert also runs, in its transaction, over the rows it added.

A feature whose table keeps a derived table in step (tenancy's spend rollup) declares it next
to the table, in the table's ``info``; the bulk insert (`fleetgate.store.bulk`) finds it there,
so the store needs to know neither the table nor what is derived from it::

    spend = Table("fg_spend", metadata, ..., info=after_insert(SPEND_ROLLUP))

- SQLite: the table's insert returns the first primary-key column of the rows really added
  (``ON CONFLICT DO NOTHING ... RETURNING``); after every table of the batch is inserted,
  ``sqlite`` runs with ``:ids`` bound to them as one JSON array.
- PostgreSQL: the batch is one statement of data-modifying CTEs; ``postgresql(sources)`` is
  one more CTE over ``sources[name]``: for the table and each table named in ``reads``, the CTE
  of the rows this batch added to it (``RETURNING *``), or the table itself when the batch
  holds none of its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table

__all__ = ["AfterInsert", "after_insert", "after_insert_of"]

_KEY = "fleetgate.after_insert"  # the key in ``Table.info``


@dataclass(frozen=True)
class AfterInsert:
    """What runs after a bulk insert into its table (see the module docstring)."""

    sqlite: str  # a statement over ``:ids``, the JSON array of the new rows' keys
    postgresql: Callable[[Mapping[str, str]], str]  # sources by table name -> a statement
    reads: tuple[str, ...] = ()  # other tables whose new rows it reads


def after_insert(follow: AfterInsert) -> dict[str, Any]:
    """The ``info`` of a `Table` whose bulk inserts ``follow`` runs after."""
    return {_KEY: follow}


def after_insert_of(table: Table) -> AfterInsert | None:
    """What ``table`` declared to run after its bulk inserts, if anything."""
    follow = table.info.get(_KEY)
    return follow if isinstance(follow, AfterInsert) else None
