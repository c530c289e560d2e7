"""fleetgate's keys, teams and spend rows in the shapes LiteLLM's proxy answers with.

Field names follow LiteLLM's ``LiteLLM_VerificationToken``, ``LiteLLM_TeamTable`` and
``LiteLLM_SpendLogs`` (what its clients and dashboards read); what fleetgate has no notion of
is the empty value LiteLLM uses for it (``{}``, ``[]``, ``None``). Money is USD.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from fleetgate.compat.litellm.lookup import DayRow
from fleetgate.tenancy.money import nusd_to_usd
from fleetgate.tenancy.periods import period_bounds

__all__ = ["BUDGET_DURATION", "day_report", "iso", "key_info", "master_key_info", "spend_log",
           "team_info"]  # fmt: skip

# fleetgate's calendar periods as LiteLLM's budget_duration strings ("total": none)
BUDGET_DURATION = {"daily": "1d", "weekly": "7d", "monthly": "30d"}


def iso(ms: int | None) -> str | None:
    """Milliseconds since the epoch as an ISO 8601 UTC time (LiteLLM's datetime fields)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def _usd(nusd: int | None) -> float | None:
    return None if nusd is None else nusd_to_usd(nusd)


def budget_reset_at(period: str | None, now_ms: int) -> str | None:
    if period in (None, "total"):
        return None
    return iso(period_bounds(period, now_ms)[1])


def key_info(row: Any, spend_nusd: int, team_alias: str | None, now_ms: int) -> dict[str, Any]:
    """One key as ``/key/info``'s ``info`` (the hash, LiteLLM's ``token``, left out)."""
    return {
        "key_name": row.key_hint,
        "key_alias": row.id,
        "spend": nusd_to_usd(spend_nusd),
        "max_budget": _usd(row.max_budget_nusd),
        "budget_duration": BUDGET_DURATION.get(row.budget_period or ""),
        "budget_reset_at": budget_reset_at(row.budget_period, now_ms),
        "expires": iso(row.expires_ms),
        "models": list(row.aliases or []),
        "aliases": {},
        "config": {},
        "user_id": row.user_id,
        "team_id": row.team_id,
        "team_alias": team_alias,
        "user_role": row.role,
        "max_parallel_requests": row.max_parallel,
        "tpm_limit": row.tpm,
        "rpm_limit": row.rpm,
        "metadata": dict(row.tags or {}),
        "permissions": {},
        "model_spend": {},
        "model_max_budget": {},
        "blocked": row.revoked_ms is not None,
        "created_at": iso(row.created_ms),
        "updated_at": iso(row.revoked_ms or row.created_ms),
    }


def master_key_info(spend_nusd: int) -> dict[str, Any]:
    """The master key as ``/key/info`` shows it (no stored row: no limits, every model)."""
    return {
        "key_name": "master key", "key_alias": "master", "spend": nusd_to_usd(spend_nusd),
        "max_budget": None, "budget_duration": None, "budget_reset_at": None, "expires": None,
        "models": [], "aliases": {}, "config": {}, "user_id": None, "team_id": None,
        "team_alias": None, "user_role": "proxy_admin", "max_parallel_requests": None,
        "tpm_limit": None, "rpm_limit": None, "metadata": {}, "permissions": {},
        "model_spend": {}, "model_max_budget": {}, "blocked": False,
        "created_at": None, "updated_at": None,
    }  # fmt: skip


def team_info(
    row: Any, spend_nusd: int, keys: Sequence[dict[str, Any]], now_ms: int
) -> dict[str, Any]:
    """``/team/info``'s answer: ``team_id``, ``team_info``, ``keys``, ``team_memberships``."""
    models = sorted({m for k in keys for m in k.get("models", [])})
    return {
        "team_id": row.id,
        "team_info": {
            "team_id": row.id,
            "team_alias": row.name,
            "organization_id": None,
            "admins": [],
            "members": [],
            "members_with_roles": [],
            "metadata": dict(row.tags or {}),
            "tpm_limit": row.tpm,
            "rpm_limit": row.rpm,
            "max_parallel_requests": row.max_parallel,
            "max_budget": _usd(row.max_budget_nusd),
            "budget_duration": BUDGET_DURATION.get(row.budget_period or ""),
            "budget_reset_at": budget_reset_at(row.budget_period, now_ms),
            "spend": nusd_to_usd(spend_nusd),
            "models": models,
            "blocked": False,
            "model_spend": {},
            "created_at": iso(row.created_ms),
        },
        "keys": list(keys),
        "team_memberships": [],
    }


def spend_log(row: Any) -> dict[str, Any]:
    """One request as a ``/spend/logs`` row (``api_key``: the key's hash, as LiteLLM's)."""
    tags = dict(row.tags or {})
    prompt, completion = int(row.input_tokens), int(row.output_tokens)
    return {
        "request_id": row.request_id,
        "call_type": "acompletion",
        "api_key": row.key_hash or row.key_id,
        "spend": nusd_to_usd(int(row.cost_nusd)),
        "total_tokens": prompt + completion,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "startTime": iso(row.created_ms),
        "endTime": iso(int(row.created_ms) + int(row.latency_ms)),
        "model": row.alias,
        "model_id": row.deployment,
        "model_group": row.alias,
        "api_base": "",
        "user": row.user_id or "",
        "team_id": row.team_id,
        "end_user": "",
        "metadata": {"status_code": row.status, "version": row.version,
                     "cached_tokens": int(row.cached_tokens), "tags": tags},
        "cache_hit": "False",
        "cache_key": "",
        "request_tags": [f"{k}={v}" for k, v in sorted(tags.items())],
        "status": "success" if int(row.status) < 400 else "failure",
    }  # fmt: skip


def day_report(rows: Iterable[DayRow]) -> list[dict[str, Any]]:
    """``/spend/logs?start_date=&end_date=``: per UTC day, the spend and its split by model
    (alias) and by user (the key's user, else the key id)."""
    days: dict[int, dict[str, Any]] = {}
    for r in rows:
        day = days.setdefault(
            r.day_ms, {"spend": 0, "models": defaultdict(int), "users": defaultdict(int)}
        )
        if r.alias:
            day["spend"] += r.cost_nusd
            day["models"][r.alias] += r.cost_nusd
        if r.key_id:
            day["users"][r.user_id or r.key_id] += r.cost_nusd
    return [
        {
            "startTime": iso(ms),
            "spend": nusd_to_usd(d["spend"]),
            "models": {k: nusd_to_usd(v) for k, v in sorted(d["models"].items())},
            "users": {k: nusd_to_usd(v) for k, v in sorted(d["users"].items())},
        }
        for ms, d in sorted(days.items())
    ]
