"""Turning the console's HTML forms into the admin services' JSON-shaped bodies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

from fleetgate.errors import ClientError, InvalidRequest

__all__ = [
    "FIRST_DAY",
    "LABELS",
    "LAST_DAY",
    "NOT_REFUSED",
    "Refusal",
    "in_words",
    "page_number",
    "page_of",
    "query_date",
    "service_body",
]

T = TypeVar("T")

FIRST_DAY, LAST_DAY = date(1970, 1, 1), date(9999, 12, 31)  # what a report may ask for

_INTS = ("rpm", "tpm", "max_parallel")

# A form field's name -> its label on the page: refusals name the field as the person saw it.
LABELS = {
    "rpm": "Requests per minute",
    "tpm": "Tokens per minute",
    "max_parallel": "Max parallel requests",
    "max_budget_usd": "Budget (USD)",
    "budget_period": "Budget period",
    "tags": "Tags",
    "name": "Team name",
    "aliases": "Aliases",
    "user": "User id",
    "role": "Role",
    "weights": "Split",
    "stage": "Stage",
    "version": "Version",
}


def query_date(raw: str | None, param: str, default: date) -> date:
    """A date from the query (YYYY-MM-DD, from 1970-01-01 to 9999-12-31), else a 400."""
    if not raw:
        return default
    try:
        day = date.fromisoformat(raw) if len(raw) <= 10 else None
    except ValueError:
        day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        raise InvalidRequest(
            f"'{param}' must be a date (YYYY-MM-DD) from {FIRST_DAY} to {LAST_DAY}", param=param
        )
    return day


def in_words(exc: ClientError) -> str:
    """A refusal's message with the internal field names (``'rpm'``) written as their labels
    (``Requests per minute``), for a person who filled in the form."""
    message = exc.message
    for name, label in LABELS.items():
        message = message.replace(f"'{name}'", label)
    return message[:1].upper() + message[1:]


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a page is drawn again with after the service refused its form: the refusal in
    words (`in_words`), its HTTP status, and the form's values as they were sent (the form
    comes back filled in). `NOT_REFUSED`: the page as first drawn."""

    error: str | None
    status: int
    values: dict[str, str] | None

    @classmethod
    def of(cls, exc: ClientError, values: dict[str, str]) -> Refusal:
        return cls(in_words(exc), exc.status, values)


NOT_REFUSED = Refusal(None, 200, None)


def _int(form: dict[str, str], name: str) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise InvalidRequest(f"{LABELS[name]} must be a whole number of 0 or more", param=name)
    return int(raw)


def _usd(form: dict[str, str], name: str) -> float | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"{LABELS[name]} must be a number of dollars", param=name) from None
    if not 0 <= value < 1e12:  # also NaN
        raise InvalidRequest(f"{LABELS[name]} must be 0 or more dollars", param=name)
    return value


def _tags(raw: str) -> dict[str, str]:
    """``team=search, env=prod`` -> ``{"team": "search", "env": "prod"}``."""
    tags: dict[str, str] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest("Tags are written key=value, separated by commas", param="tags")
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


def page_of(rows: list[T], page: int, size: int) -> tuple[list[T], bool]:
    """Page ``page`` (1-based, `page_number`) of ``rows`` at ``size`` rows a page, and whether
    more rows follow it."""
    return rows[(page - 1) * size : page * size], len(rows) > page * size
