"""Reconcile the gateway's spend with a provider's bill, per UTC day and model.

The bill is a provider's own export: OpenAI's Costs API (``GET /v1/organization/costs``,
``group_by=line_item``: pages of daily buckets whose results name ``"<model>, input"`` etc.
in ``line_item`` and an ``amount`` in dollars), Anthropic's cost report
(``GET /v1/organizations/cost_report``, ``group_by=description``: daily buckets whose results
name the ``model`` and an ``amount`` in cents as a decimal string), either as one page, a JSON
list of pages or one page per line; or a CSV with the columns ``date``, ``model`` and
``cost_usd``. The gateway's side is the spend table (``cost_nusd``), its rows' deployments
mapped to the provider's model names through the config (``AliasConfig.deployment_ids``):
only deployments of that provider on its own API (`BILLING_HOSTS`), not self-hosted engines
that speak its protocol.

A day and model is flagged when the two differ by more than ``tolerance`` of the larger (and by
more than ``min_usd``): spend the gateway never saw (another client on the same provider key,
a deployment no longer in the config), spend it did not bill (a price missing from the config),
or a price that changed. Dated snapshots in the bill (``gpt-4o-2024-08-06``) count for the
configured name they extend (``gpt-4o``).
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from sqlalchemy import func, select

from fleetgate.config.schema import GatewayConfig
from fleetgate.errors import InvalidRequest
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import spend
from fleetgate.timespans import DAY_MS

__all__ = [
    "ALL_MODELS",
    "BILLING_HOSTS",
    "BillLine",
    "Difference",
    "deployment_models",
    "gateway_spend",
    "read_bill",
    "reconcile",
]

ALL_MODELS = "*"  # a bill without a model breakdown: compared per day over every model
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")  # gpt-4o-2024-08-06, claude-...-20250514


@dataclass(frozen=True)
class BillLine:
    day: date
    model: str
    usd: float


@dataclass(frozen=True)
class Difference:
    day: date
    model: str
    gateway_usd: float
    bill_usd: float
    flagged: bool

    @property
    def diff_usd(self) -> float:
        return self.gateway_usd - self.bill_usd


def _day(value: Any, where: str) -> date:
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC).date()
        text = str(value)
        if len(text) == 10:
            return date.fromisoformat(text)
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).date()
    except (ValueError, OverflowError, OSError):
        raise InvalidRequest(f"{where}: not a date or timestamp: {value!r}") from None


def _pages(raw: bytes) -> list[dict[str, Any]]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            data = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"the bill is neither JSON, JSON lines nor CSV: {exc}") from None
    pages = data if isinstance(data, list) else [data]
    if not all(isinstance(p, dict) and isinstance(p.get("data"), list) for p in pages):
        raise InvalidRequest("the bill's JSON has no `data` list of buckets")
    return pages


def _openai(bucket: dict[str, Any], where: str) -> Iterable[BillLine]:
    day = _day(bucket.get("start_time"), where)
    for result in bucket.get("results") or []:
        amount = (result.get("amount") or {}).get("value")
        if not isinstance(amount, int | float):
            raise InvalidRequest(f"{where}: a result without amount.value")
        item = result.get("line_item")
        model = str(item).split(",")[0].strip() if item else ALL_MODELS
        yield BillLine(day, model, float(amount))


def _anthropic(bucket: dict[str, Any], where: str) -> Iterable[BillLine]:
    day = _day(bucket.get("starting_at"), where)
    for result in bucket.get("results") or []:
        try:
            cents = float(result["amount"])
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest(f"{where}: a result without a decimal amount") from None
        if str(result.get("currency", "USD")).upper() != "USD":
            raise InvalidRequest(f"{where}: only USD bills are reconciled")
        model = result.get("model") or (
            ALL_MODELS if result.get("description") is None else str(result["description"])
        )
        yield BillLine(day, str(model), cents / 100.0)


def _csv(text: str) -> list[BillLine]:
    rows = csv.DictReader(io.StringIO(text))
    if not rows.fieldnames or not {"date", "model", "cost_usd"} <= set(rows.fieldnames):
        raise InvalidRequest("a CSV bill needs the columns date, model and cost_usd")
    out = []
    for n, row in enumerate(rows, start=2):
        try:
            usd = float(row["cost_usd"])
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"line {n}: cost_usd {row['cost_usd']!r} is not a number"
            ) from None
        out.append(BillLine(_day(row["date"], f"line {n}"), row["model"] or ALL_MODELS, usd))
    return out


def read_bill(path: Path) -> list[BillLine]:
    """The bill's lines (see the module doc for the formats); InvalidRequest when unreadable."""
    raw = path.read_bytes()
    if raw.lstrip()[:1] not in (b"{", b"["):
        return _csv(raw.decode("utf-8-sig"))
    lines: list[BillLine] = []
    for p, page in enumerate(_pages(raw)):
        for b, bucket in enumerate(page["data"]):
            where = f"page {p + 1}, bucket {b + 1}"
            if not isinstance(bucket, dict):
                raise InvalidRequest(f"{where}: not an object")
            if "start_time" in bucket:
                lines += _openai(bucket, where)
            elif "starting_at" in bucket:
                lines += _anthropic(bucket, where)
            else:
                raise InvalidRequest(f"{where}: neither start_time (OpenAI) nor starting_at")
    return lines


BILLING_HOSTS: dict[str, tuple[str, ...]] = {
    "openai": ("api.openai.com",),
    "anthropic": ("api.anthropic.com",),
    "azure": (".openai.azure.com",),  # a suffix: <resource>.openai.azure.com
}
"""Where a provider's own API answers: deployments elsewhere (a vLLM behind ``provider: openai``)
are not on its bill."""


def _billed_by(provider: str, api_base: str | None) -> bool:
    if api_base is None:
        return True  # the provider's default endpoint
    host = urlsplit(api_base).hostname or ""
    return any(
        host == h or (h.startswith(".") and host.endswith(h)) for h in BILLING_HOSTS[provider]
    )


def deployment_models(config: GatewayConfig, provider: str) -> dict[str, str]:
    """Deployment id -> the model name ``provider`` bills, for the deployments it serves
    (``provider`` in the config and ``api_base`` on the provider's own API)."""
    if provider not in BILLING_HOSTS:
        raise InvalidRequest(f"no bill format for provider {provider!r}", param="provider")
    return {
        dep_id: dep.model
        for alias in config.models
        for dep_id, dep in alias.deployment_ids()
        if dep.provider == provider and _billed_by(provider, dep.api_base)
    }


async def gateway_spend(
    db: Database, models: Mapping[str, str], first: date, last: date
) -> dict[tuple[date, str], float]:
    """USD per (UTC day, billed model) from the spend table, days ``first``..``last``."""
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    since_ms = int(start.timestamp() * 1000)
    until_ms = since_ms + ((last - first).days + 1) * DAY_MS
    day = (spend.c.created_ms // DAY_MS).label("day")
    query = (
        select(day, spend.c.deployment, func.coalesce(func.sum(spend.c.cost_nusd), 0))
        .where(spend.c.created_ms >= since_ms, spend.c.created_ms < until_ms)
        .where(spend.c.deployment.in_(list(models)))
        .group_by(day, spend.c.deployment)
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    out: dict[tuple[date, str], float] = defaultdict(float)
    epoch = date(1970, 1, 1)
    for day_n, deployment, nusd in rows:
        out[(epoch + timedelta(days=int(day_n)), models[str(deployment)])] += int(nusd) / 1e9
    return dict(out)


def _billed_as(model: str, known: set[str]) -> str:
    """A bill's model under the configured name it is a dated snapshot of, if any."""
    if model in known or model == ALL_MODELS:
        return model
    base = _SNAPSHOT.sub("", model)
    return base if base in known else model


def reconcile(
    gateway: Mapping[tuple[date, str], float],
    bill: Iterable[BillLine],
    *,
    tolerance: float = 0.02,
    min_usd: float = 0.01,
) -> list[Difference]:
    """One row per day and model in the bill's days, sorted; ``flagged`` where they differ."""
    lines = list(bill)
    if not lines:
        return []
    days = {line.day for line in lines}
    known = {model for _, model in gateway}
    billed: dict[tuple[date, str], float] = defaultdict(float)
    for line in lines:
        billed[(line.day, _billed_as(line.model, known))] += line.usd
    ours: dict[tuple[date, str], float] = defaultdict(float)
    by_day = any(model == ALL_MODELS for _, model in billed)
    if by_day:  # part of the bill has no model: compare whole days
        totals: dict[tuple[date, str], float] = defaultdict(float)
        for (day, _), usd in billed.items():
            totals[(day, ALL_MODELS)] += usd
        billed = totals
    for (day, model), usd in gateway.items():
        if day in days:
            ours[(day, ALL_MODELS if by_day else model)] += usd
    out = []
    for key in sorted(set(billed) | set(ours)):
        g, b = ours.get(key, 0.0), billed.get(key, 0.0)
        flagged = abs(g - b) > max(min_usd, tolerance * max(abs(g), abs(b)))
        out.append(Difference(key[0], key[1], round(g, 6), round(b, 6), flagged))
    return out
