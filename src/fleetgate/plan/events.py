"""Marked events (promotions, holidays) and planned business lines for the forecast.

Given as a JSON file (``--events``) or flags::

    {"events": [
       {"name": "spring-sale", "kind": "promotion",
        "start": "2026-03-10T00:00:00Z", "end": "2026-03-13T00:00:00Z"},
       {"name": "summer-sale", "kind": "promotion",
        "start": "2026-08-10T00:00:00Z", "end": "2026-08-13T00:00:00Z"},
       {"name": "new-year", "kind": "holiday", "start": "...", "end": "...", "multiplier": 0.6}],
     "business_lines": [
       {"name": "support-bot", "start": "2026-09-01T00:00:00Z", "requests_per_day": 50000,
        "input_tokens": 1500, "output_tokens": 300, "ramp_days": 30}]}

An event's ``multiplier`` (traffic during it over the usual traffic) is optional: a past event
measures its own from the history, a future one without it takes the mean of the past events of
its ``kind`` (or of all past events when none has that kind; 1.0 when there are none).
A business line adds ``requests_per_day`` (ramped linearly over ``ramp_days``) shaped like the
existing traffic's week.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from fleetgate.errors import InvalidRequest
from fleetgate.plan.history import parse_hour

__all__ = ["BusinessLine", "Event", "load_plan_inputs", "parse_event_flag"]


@dataclass(frozen=True)
class Event:
    """Hours ``[start, end)`` (epoch hours) where traffic is ``multiplier`` times the usual."""

    name: str
    start: int
    end: int
    kind: str = "event"
    multiplier: float | None = None

    def hours(self) -> range:
        return range(self.start, self.end)


@dataclass(frozen=True)
class BusinessLine:
    """New traffic from ``start`` (epoch hour): requests per day and tokens per request."""

    name: str
    start: int
    requests_per_day: float
    input_tokens: float
    output_tokens: float
    ramp_days: float = 0.0


def _num(item: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{where}: '{key}' must be a number", param=key)
    return float(value)


def _event(item: Any, i: int) -> Event:
    where = f"events[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidRequest(f"{where}: an object with a 'name'", param="events")
    for key in ("start", "end"):
        if not isinstance(item.get(key), str | int | float):
            raise InvalidRequest(f"{where}: '{key}' (ISO-8601 or epoch seconds) is required")
    start = parse_hour(str(item["start"]), f"{where}.start")
    end = parse_hour(str(item["end"]), f"{where}.end")
    if end <= start:
        raise InvalidRequest(f"{where}: 'end' must be after 'start'", param="events")
    mult = item.get("multiplier")
    if mult is not None and (_num(item, "multiplier", where) <= 0):
        raise InvalidRequest(f"{where}: 'multiplier' must be > 0", param="multiplier")
    return Event(
        name=item["name"],
        start=start,
        end=end,
        kind=str(item.get("kind", "event")),
        multiplier=None if mult is None else float(mult),
    )


def _line(item: Any, i: int) -> BusinessLine:
    where = f"business_lines[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidRequest(f"{where}: an object with a 'name'", param="business_lines")
    if not isinstance(item.get("start"), str | int | float):
        raise InvalidRequest(f"{where}: 'start' is required", param="business_lines")
    line = BusinessLine(
        name=item["name"],
        start=parse_hour(str(item["start"]), f"{where}.start"),
        requests_per_day=_num(item, "requests_per_day", where),
        input_tokens=_num(item, "input_tokens", where),
        output_tokens=_num(item, "output_tokens", where),
        ramp_days=_num(item, "ramp_days", where, 0.0),
    )
    if min(line.requests_per_day, line.input_tokens, line.output_tokens, line.ramp_days) < 0:
        raise InvalidRequest(f"{where}: numbers must be >= 0", param="business_lines")
    return line


def load_plan_inputs(path: Path) -> tuple[list[Event], list[BusinessLine]]:
    """Events and business lines from the JSON file of the module docstring."""
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc}", param="events") from exc
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"{path} is not JSON: {exc}", param="events") from exc
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path}: a JSON object with 'events' and 'business_lines'")
    unknown = sorted(set(data) - {"events", "business_lines"})
    if unknown:
        raise InvalidRequest(f"{path}: unknown key {', '.join(unknown)}", param="events")
    events, lines = data.get("events", []), data.get("business_lines", [])
    if not isinstance(events, list) or not isinstance(lines, list):
        raise InvalidRequest(f"{path}: 'events' and 'business_lines' are lists")
    return [_event(e, i) for i, e in enumerate(events)], [_line(b, i) for i, b in enumerate(lines)]


def parse_event_flag(text: str) -> Event:
    """``--event NAME,KIND,START,END[,MULTIPLIER]``."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (4, 5):
        raise InvalidRequest("--event takes NAME,KIND,START,END[,MULTIPLIER]", param="event")
    item: dict[str, Any] = dict(zip(("name", "kind", "start", "end"), parts[:4], strict=True))
    if len(parts) == 5:
        try:
            item["multiplier"] = float(parts[4])
        except ValueError:
            raise InvalidRequest("--event: MULTIPLIER must be a number", param="event") from None
    return _event(item, 0)
