"""Turning the console's HTML forms into the admin services' JSON-shaped bodies."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["page_number", "service_body"]

_INTS = ("rpm", "tpm", "max_parallel")


def _int(form: dict[str, str], name: str) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise InvalidRequest(f"'{name}' must be a whole number", param=name)
    return int(raw)


def _usd(form: dict[str, str], name: str) -> float | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a number of dollars", param=name) from None
    return value


def _tags(raw: str) -> dict[str, str]:
    """``team=search, env=prod`` -> ``{"team": "search", "env": "prod"}``."""
    tags: dict[str, str] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest("tags are written key=value, separated by commas", param="tags")
        tags[key.strip()] = value.strip()
    return tags


def service_body(form: dict[str, str], *fields: str) -> dict[str, Any]:
    """The body the tenancy service takes for a team or key form."""
    body: dict[str, Any] = {name: _int(form, name) for name in _INTS}
    body["max_budget_usd"] = _usd(form, "max_budget_usd")
    period = form.get("budget_period", "").strip()
    body["budget_period"] = period or None
    if form.get("tags", "").strip():
        body["tags"] = _tags(form["tags"])
    for name in fields:
        value = form.get(name, "").strip()
        if name == "aliases":
            body[name] = [a.strip() for a in value.split(",") if a.strip()] if value else None
        elif value:
            body[name] = value
    return body


def page_number(raw: str | None) -> int:
    """A 1-based page number from the query (400 for anything else)."""
    if raw is None or raw == "":
        return 1
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6 and int(raw) >= 1):
        raise InvalidRequest("'page' must be a whole number from 1", param="page")
    return int(raw)
