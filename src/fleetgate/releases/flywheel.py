"""The data flywheel: answers users rejected become the next ``fix`` eval items.

A bad case is a request on an alias that follows the registry (`fleetgate.releases.outcomes`
recorded it) that got negative feedback (score < 0.5, from a key of the request's team or the
master key) or, with ``regenerations``, whose exact prompt the same key sent again within the
regeneration window. Each becomes one suite item (`fleetgate.releases.suites`)::

    {"id": "fb-<request id>", "kind": "fix", "messages": [...], "scorer": "judge",
     "rejected": "<the answer users rejected>", "comment": "<their comment>",
     "source": {"request_id", "response_id", "alias", "version", "team_id", "reason",
                "score", "tags"}}

The prompt and the answer come from the request audit, which holds them only for teams that
log payloads (``log_payloads``); a bad case without them is counted, not exported. What the
guardrails blocked (an output check's ``content_filter``, or a flagged safety audit record)
is never exported. Run the file with a judge (``fleetgate eval run --suite fix.jsonl --judge
ALIAS``): the judge sees the rejected answer and the comment.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, select

from fleetgate.releases.feedback import NEGATIVE_BELOW, asked_again
from fleetgate.releases.tables import feedback, release_requests
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import request_audit, safety_audit

__all__ = ["bad_cases"]


async def bad_cases(
    db: Database,
    *,
    since_ms: int,
    alias: str | None = None,
    regenerations: bool = True,
    regen_window_s: float = 600.0,
    limit: int = 1000,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(suite items, counts of what was skipped: ``blocked``, ``no_payload``)."""
    r = release_requests
    same_team = or_(feedback.c.team_id.is_(None), feedback.c.team_id == r.c.team_id)
    rated = (
        select(r, feedback.c.score, feedback.c.comment, feedback.c.tags)
        .select_from(r.join(feedback, and_(feedback.c.request_id == r.c.request_id, same_team)))
        .where(r.c.created_ms >= since_ms, feedback.c.score < NEGATIVE_BELOW)
        .order_by(r.c.created_ms.desc())
        .limit(limit)
    )
    again = (
        select(r)
        .where(r.c.created_ms >= since_ms, asked_again(regen_window_s))
        .order_by(r.c.created_ms.desc())
        .limit(limit)
    )
    if alias is not None:
        rated = rated.where(r.c.alias == alias)
        again = again.where(r.c.alias == alias)
    cases: dict[str, dict[str, Any]] = {}
    async with db.engine.connect() as conn:
        for row in await conn.execute(rated):
            m = dict(row._mapping)
            m["reason"] = "feedback"
            cases.setdefault(m["request_id"], m)  # the first (newest) verdict of a request
        if regenerations:
            for row in await conn.execute(again):
                m = dict(row._mapping)
                if m["request_id"] not in cases:
                    cases[m["request_id"]] = {**m, "reason": "regeneration", "score": None,
                                              "comment": None, "tags": []}  # fmt: skip
        ids = list(cases)[:limit]
        audits: dict[str, Any] = {}
        flagged: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            q = select(request_audit).where(request_audit.c.request_id.in_(chunk))
            audits.update({a.request_id: a for a in await conn.execute(q)})
            q2 = select(safety_audit.c.request_id).where(
                safety_audit.c.request_id.in_(chunk), safety_audit.c.flagged.is_(True)
            )
            flagged.update(x.request_id for x in await conn.execute(q2))
    items: list[dict[str, Any]] = []
    skipped = {"blocked": 0, "no_payload": 0}
    for rid in ids:
        case = cases[rid]
        audit = audits.get(rid)
        if (
            case["blocked"]
            or rid in flagged
            or (audit is not None and audit.error_type == "content_filter")
        ):
            skipped["blocked"] += 1
            continue
        messages = _messages(audit.prompt if audit is not None else None)
        if messages is None or audit is None or audit.response is None:
            skipped["no_payload"] += 1
            continue
        item: dict[str, Any] = {
            "id": f"fb-{rid}", "kind": "fix", "messages": messages, "scorer": "judge",
            "rejected": audit.response,
            "source": {k: case[k] for k in ("request_id", "response_id", "alias", "version",
                                            "team_id", "reason", "score", "tags")},
        }  # fmt: skip
        if case.get("comment"):
            item["comment"] = case["comment"]
        items.append(item)
    return items, skipped


def _messages(prompt: Any) -> list[dict[str, Any]] | None:
    """The chat messages of a logged request body (a completion's prompt as one message)."""
    if not isinstance(prompt, dict):
        return None
    messages = prompt.get("messages")
    if isinstance(messages, list) and messages:
        return messages
    text = prompt.get("prompt")
    if isinstance(text, str) and text:
        return [{"role": "user", "content": text}]
    return None
