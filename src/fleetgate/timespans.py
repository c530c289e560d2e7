"""Lengths of time in milliseconds, for the stores' ``*_ms`` columns and the periods cut from
them (rollup buckets, budget periods, retention). One definition, so a day is the same
everywhere it is counted."""

from __future__ import annotations

__all__ = ["DAY_MS", "HOUR_MS", "MINUTE_MS"]

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
