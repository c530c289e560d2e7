"""Hourly traffic history per alias: read from the gateway's spend table or an exported CSV.

One row per (hour, alias): ``requests``, ``input_tokens``, ``output_tokens``. Hours are UTC and
counted from the epoch (``hour = epoch_seconds // 3600``); an hour with no row is an hour with
no traffic, so a series is contiguous from the first hour to the last.

CSV format (a header line, then rows; ``hour`` is ISO-8601 or epoch seconds)::

    hour,alias,requests,input_tokens,output_tokens
    2026-06-01T00:00:00Z,chat,812,1624000,406000

Example::

    history = read_history_csv(Path("history.csv"))
    history = await read_history_store(db, since_ms=..., until_ms=...)
    history.total("requests")          # numpy array, one value per hour, all aliases summed
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import and_, func, select

from fleetgate.csv_export import csv_text, restore_cell
from fleetgate.errors import InvalidRequest
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import spend
from fleetgate.timespans import HOUR_MS

__all__ = [
    "FIELDS",
    "HourlyHistory",
    "format_hour",
    "parse_hour",
    "read_history_csv",
    "read_history_store",
    "write_history_csv",
]

FIELDS = ("requests", "input_tokens", "output_tokens")


def parse_hour(text: str, what: str = "hour") -> int:
    """Epoch hour of an ISO-8601 time (naive = UTC) or of epoch seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidRequest(
                f"{what}: {text!r} is neither ISO-8601 nor epoch seconds", param=what
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp()
    return int(seconds // 3600)


def format_hour(hour: int) -> str:
    """ISO-8601 UTC of an epoch hour (``2026-06-01T00:00:00Z``)."""
    return datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class HourlyHistory:
    """Contiguous hourly series per alias from ``start`` (an epoch hour) for ``hours`` hours."""

    start: int
    hours: int
    series: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, str, float, float, float]]) -> HourlyHistory:
        """From ``(hour, alias, requests, input_tokens, output_tokens)`` rows (summed on
        repeats; missing hours are zero)."""
        rows = list(rows)
        if not rows:
            raise InvalidRequest("the history has no rows", param="history")
        start = min(r[0] for r in rows)
        hours = max(r[0] for r in rows) - start + 1
        series: dict[str, dict[str, np.ndarray]] = {}
        for hour, alias, *values in rows:
            per = series.setdefault(alias, {f: np.zeros(hours) for f in FIELDS})
            for name, value in zip(FIELDS, values, strict=True):
                if value < 0:
                    raise InvalidRequest(f"{name} must be >= 0 (hour {format_hour(hour)})")
                per[name][hour - start] += value
        return cls(start=start, hours=hours, series=series)

    @property
    def aliases(self) -> list[str]:
        return sorted(self.series)

    def total(self, name: str, aliases: Iterable[str] | None = None) -> np.ndarray:
        """One field summed over ``aliases`` (all by default), per hour."""
        picked = self.aliases if aliases is None else list(aliases)
        out = np.zeros(self.hours)
        for alias in picked:
            out += self.series[alias][name]
        return out

    def only(self, aliases: Iterable[str]) -> HourlyHistory:
        """The same history restricted to ``aliases`` (unknown ones are a clear error)."""
        wanted = list(aliases)
        unknown = sorted(set(wanted) - set(self.series))
        if unknown:
            raise InvalidRequest(
                f"no history for alias {', '.join(unknown)}; it has {', '.join(self.aliases)}",
                param="alias",
            )
        return HourlyHistory(self.start, self.hours, {a: self.series[a] for a in wanted})

    def window(self, first: int, count: int) -> HourlyHistory:
        """``count`` hours from epoch hour ``first`` (must lie inside the history)."""
        lo = first - self.start
        if lo < 0 or lo + count > self.hours or count < 1:
            raise InvalidRequest("the window lies outside the history", param="window")
        cut = {
            a: {f: v[lo : lo + count].copy() for f, v in s.items()} for a, s in self.series.items()
        }
        return HourlyHistory(first, count, cut)


def read_history_csv(source: Path | str) -> HourlyHistory:
    """Read the CSV format of the module docstring (a path, or the text itself)."""
    try:
        text = source.read_text() if isinstance(source, Path) else source
    except OSError as exc:
        raise InvalidRequest(f"cannot read the history: {exc}", param="history") from exc
    reader = csv.DictReader(io.StringIO(text))
    needed = {"hour", "alias", *FIELDS}
    missing = sorted(needed - set(reader.fieldnames or ()))
    if missing:
        raise InvalidRequest(
            f"history CSV: missing column {', '.join(missing)} (needs hour, alias, "
            "requests, input_tokens, output_tokens)",
            param="history",
        )
    rows = []
    for line, rec in enumerate(reader, start=2):
        try:
            values = tuple(float(rec[f]) for f in FIELDS)
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"history CSV line {line}: requests and tokens must be numbers", param="history"
            ) from None
        if not rec["alias"]:
            raise InvalidRequest(f"history CSV line {line}: empty alias", param="history")
        hour = parse_hour(rec["hour"] or "", f"history CSV line {line}")
        rows.append((hour, restore_cell(rec["alias"]), *values))
    return HourlyHistory.from_rows(rows)  # type: ignore[arg-type]


def write_history_csv(history: HourlyHistory) -> str:
    """The history as CSV text (hours without traffic left out), readable back as is."""
    rows = []
    for alias in history.aliases:
        s = history.series[alias]
        for i in range(history.hours):
            values = [s[f][i] for f in FIELDS]
            if any(values):
                rows.append([format_hour(history.start + i), alias, *(f"{v:g}" for v in values)])
    return csv_text(["hour", "alias", *FIELDS], rows, lineterminator="\n")


async def read_history_store(
    db: Database,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    aliases: Iterable[str] | None = None,
) -> HourlyHistory:
    """Hourly requests and tokens per alias from the spend table (successful requests only:
    status < 400), grouped in SQL the same way on SQLite and PostgreSQL."""
    hour = (spend.c.created_ms // HOUR_MS).label("hour")
    query = select(
        hour,
        spend.c.alias,
        func.count().label("requests"),
        func.coalesce(func.sum(spend.c.input_tokens), 0).label("input_tokens"),
        func.coalesce(func.sum(spend.c.output_tokens), 0).label("output_tokens"),
    )
    where = [spend.c.status < 400]
    if since_ms is not None:
        where.append(spend.c.created_ms >= since_ms)
    if until_ms is not None:
        where.append(spend.c.created_ms < until_ms)
    if aliases is not None:
        where.append(spend.c.alias.in_(list(aliases)))
    query = query.where(and_(*where)).group_by(hour, spend.c.alias)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    if not rows:
        raise InvalidRequest("the spend table has no requests in that window", param="history")
    return HourlyHistory.from_rows(
        (
            int(r.hour),
            str(r.alias),
            float(r.requests),
            float(r.input_tokens),
            float(r.output_tokens),
        )
        for r in rows
    )
