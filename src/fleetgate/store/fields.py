"""Values that fit their columns: the edge checks of every durable write.

A value the database would refuse (a string longer than its column, an integer out of its
range, a NUL character PostgreSQL cannot store) must never reach it inside a batch, where one
refusal fails every record with it. Two kinds of edge:

- what a caller sent (a model name, a key tag) is checked where it arrives and refused with a
  400 naming the field: `require_fits`;
- what the gateway produced itself is clamped on the way to the store: by the insert
  statement (`ColumnShape.select_sql`, in the database's own code, for the common cases: a
  string too long, an integer out of range) and, when the store still refuses a batch, by
  `RowShape.fit` in Python (also NUL characters and values of a near type) before one retry.

Example::

    require_fits(body["model"], spend.c.alias, "model")   # InvalidRequest when too long
    shape = RowShape(spend)
    shape.fit({"alias": "m" * 300, ...})                  # a tuple, alias cut to 200
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import JSON, BigInteger, Boolean, Column, Integer, String, Table

from fleetgate.errors import InvalidRequest

__all__ = ["ColumnShape", "RowShape", "column_limit", "column_range", "require_fits"]

Kind = Literal["str", "int", "bool", "json", "other"]

_RANGES = {"int4": (-(2**31), 2**31 - 1), "int8": (-(2**63), 2**63 - 1)}


def column_limit(column: Column[Any]) -> int | None:
    """The most characters ``column`` holds (``None``: unbounded or not a string)."""
    length = getattr(column.type, "length", None)
    return int(length) if isinstance(column.type, String) and length else None


def column_range(column: Column[Any]) -> tuple[int, int]:
    """The smallest and largest integer ``column`` holds (an ``Integer`` or ``BigInteger``)."""
    return _RANGES["int8" if isinstance(column.type, BigInteger) else "int4"]


def require_fits(value: str, column: Column[Any], param: str) -> str:
    """``value`` when it fits ``column``; else a 400 naming ``param`` (a caller's input)."""
    limit = column_limit(column)
    if limit is not None and len(value) > limit:
        raise InvalidRequest(f"'{param}' is longer than {limit} characters", param=param)
    if "\x00" in value:
        raise InvalidRequest(f"'{param}' must not contain NUL characters", param=param)
    return value


@dataclass(frozen=True, slots=True)
class ColumnShape:
    """What one column accepts: ``kind``, the longest string, the integer range."""

    name: str
    kind: Kind
    max_len: int | None = None
    lo: int = 0
    hi: int = 0
    sql_type: str = "text"  # text, int4, int8, bool or json

    @property
    def array_type(self) -> str:
        """The element type a bulk insert sends this column's values as (PostgreSQL)."""
        return {"int4": "int8", "json": "text"}.get(self.sql_type, self.sql_type)

    @classmethod
    def of(cls, column: Column[Any]) -> ColumnShape:
        t = column.type
        if isinstance(t, Boolean):
            return cls(column.name, "bool", sql_type="bool")
        if isinstance(t, Integer):  # BigInteger is an Integer too
            name = "int8" if isinstance(t, BigInteger) else "int4"
            lo, hi = _RANGES[name]
            return cls(column.name, "int", lo=lo, hi=hi, sql_type=name)
        if isinstance(t, JSON):
            return cls(column.name, "json", sql_type="json")
        if isinstance(t, String):  # Text is a String without a length
            return cls(column.name, "str", max_len=column_limit(column))
        return cls(column.name, "other")

    def fit(self, value: Any) -> Any:
        """The value clamped to fit; one it cannot convert is left for the store to judge."""
        if value is None:
            return "null" if self.kind == "json" else None  # as SQLAlchemy stores a JSON None
        if self.kind == "str":
            return self._fit_str(value)
        if self.kind == "int":
            return self._fit_int(value)
        if self.kind == "json":
            return orjson.dumps(value).decode()  # JSON text (cast by the statement)
        if self.kind == "bool" and isinstance(value, int):
            return bool(value)
        return value

    def select_sql(self, expr: str, dialect: str) -> str:
        """SQL that clamps ``expr`` (this column's incoming value) as `fit` would."""
        if self.kind == "str" and self.max_len is not None:
            return f"substr({expr}, 1, {self.max_len})"
        if self.kind == "int" and self.sql_type == "int4":  # sent as int8: clamp, keep NULL
            return (
                f"CASE WHEN {expr} > {self.hi} THEN {self.hi} "
                f"WHEN {expr} < {self.lo} THEN {self.lo} ELSE {expr} END"
            )
        if self.kind == "json" and dialect == "postgresql":
            return f"{expr}::json"
        return expr

    def _fit_str(self, value: Any) -> Any:
        if not isinstance(value, str):
            if not isinstance(value, int | float | bool):
                return value
            value = str(value)
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        if self.max_len is not None and len(value) > self.max_len:
            value = value[: self.max_len]
        return value

    def _fit_int(self, value: Any) -> Any:
        if isinstance(value, float):
            if not math.isfinite(value):
                return value
            value = int(value)
        if isinstance(value, int):  # bool included: True is 1
            return min(max(int(value), self.lo), self.hi)
        return value


class RowShape:
    """The columns of ``table`` in order. `raw` gives a row's values as they are (JSON
    columns as JSON text), `fit` clamped to fit; a missing column is ``None`` (the store
    decides whether that is allowed)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.columns = tuple(ColumnShape.of(c) for c in table.columns)
        self.names = tuple(c.name for c in self.columns)
        self._json = tuple(i for i, c in enumerate(self.columns) if c.kind == "json")

    def raw(self, row: Mapping[str, Any]) -> list[Any]:
        values = [row.get(name) for name in self.names]
        for i in self._json:
            value = values[i]
            values[i] = "null" if value is None else orjson.dumps(value).decode()
        return values

    def fit(self, row: Mapping[str, Any]) -> list[Any]:
        return [c.fit(row.get(c.name)) for c in self.columns]
