"""`UsageRecorder`: the request path's step that records who asked, in which session, on which
plan, and what it cost, for every request that reached an upstream.

The end user is the OpenAI ``user`` field, else the ``x-user-id`` header, else the key's user;
the session and conversation come from ``x-session-id`` and ``x-conversation-id``. Where the
team does not log payloads (``log_payloads: false``, the default), the three are replaced by a
keyed hash (HMAC-SHA-256, scoped to the team): counts and joins stay exact, the ids are not
stored. The last user message is only ever stored as a hash (regenerations are spotted by it).

A ``review_share`` of an alias's requests (by a hash of the request id) from teams that log
payloads is sampled for human review: its answer is captured and queued with the prompt.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any

from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.writer import InsightsWriter
from fleetgate.messages_text import content_text
from fleetgate.tenancy.money import outcome_cost_nusd
from fleetgate.timespans import DAY_MS

__all__ = ["Pseudonyms", "UsageRecorder", "prompt_hash", "sampled"]

_MAX_ID = 200
_REVIEW = "insights.review"


def sampled(request_id: str, share: float) -> bool:
    """Whether ``request_id`` falls in a ``share`` of all ids (the same answer on every replica:
    a hash of the id, which the gateway drew at random)."""
    digest = hashlib.sha256(request_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") < share * 2**64


class Pseudonyms:
    """Ids as stored: as given (cut to 200 characters) or a keyed hash scoped to the team."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def of(self, team_id: str, value: str | None, *, hashed: bool) -> str | None:
        if not value:
            return None
        if not hashed:
            return value[:_MAX_ID]
        digest = hmac.new(self._secret, f"{team_id}\x00{value}".encode(), hashlib.sha256)
        return "h:" + digest.hexdigest()[:32]


def prompt_hash(body: dict[str, Any]) -> str | None:
    """A hash of the last user message (chat) or the prompt (completions), or None."""
    messages = body.get("messages")
    text: str | None = None
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                text = content_text(message.get("content"))
                break
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    if not text:
        return None
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def _end_user(req: GatewayRequest) -> str | None:
    user = req.body.get("user")
    if isinstance(user, str) and user.strip():
        return user.strip()
    return req.headers.get("x-user-id") or req.principal.user_id


class UsageRecorder:
    """A `fleetgate.contract.stages.Stage`: records in ``after`` (nothing to check before)."""

    name = "insights"

    def __init__(
        self,
        config: Callable[[], InsightsConfig],
        writer: InsightsWriter,
        pseudonyms: Pseudonyms,
        logs_payloads: Callable[[str | None], bool],
    ) -> None:
        self._config = config
        self._writer = writer
        self._pseudonyms = pseudonyms
        self._logs_payloads = logs_payloads

    async def before(self, req: GatewayRequest) -> None:
        share = self._config().review_share.get(req.alias, 0.0)
        if (
            share > 0
            and sampled(req.request_id, share)
            and self._logs_payloads(req.principal.team_id)
        ):
            req.state[_REVIEW] = True  # a team that does not log payloads is never sampled
            req.capture_response = True

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        if outcome.deployment is None:
            return  # refused before any upstream: no spend row either
        row = self.row(req, outcome)
        self._writer.add(row)
        if req.state.get(_REVIEW) and outcome.status < 400:
            self._writer.add_review({
                "request_id": row["request_id"], "created_ms": row["created_ms"],
                "team_id": row["team_id"], "alias": row["alias"], "version": row["version"],
                "prompt": req.body.get("messages", req.body.get("prompt")),
                "response": outcome.response_text, "scores": None, "score": None,
                "reviewer": None, "scored_ms": None,
            })  # fmt: skip

    def row(self, req: GatewayRequest, outcome: Outcome) -> dict[str, Any]:
        """The ``fg_insight_requests`` row of a finished request."""
        p = req.principal
        team = p.team_id or ""
        hashed = not self._logs_payloads(p.team_id)
        ids = self._pseudonyms
        created = int((req.received_at or time.time()) * 1000)
        cost = outcome_cost_nusd(outcome)
        return {
            "request_id": req.request_id,
            "created_ms": created,
            "day": created // DAY_MS,
            "team_id": team,
            "key_id": p.key_id,
            "end_user": ids.of(team, _end_user(req), hashed=hashed),
            "session_id": ids.of(team, req.headers.get("x-session-id"), hashed=hashed),
            "conversation_id": ids.of(team, req.headers.get("x-conversation-id"), hashed=hashed),
            "plan": self._config().plan_of(p.team_id, p.key_id),
            "alias": (outcome.alias or req.alias)[:200],
            "version": outcome.version,
            "status": outcome.status,
            "stream": int(req.stream),
            "finish_reason": (outcome.finish_reason or None) and str(outcome.finish_reason)[:32],
            "response_id": (outcome.response_id or None) and outcome.response_id[:200],
            "prompt_hash": prompt_hash(req.body),
            "input_tokens": outcome.prompt_tokens,
            "output_tokens": outcome.completion_tokens,
            "cost_nusd": cost,
        }
