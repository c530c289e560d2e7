"""`TenancyStage`: limits and budgets before the upstream call; settle, spend and audit after.

``before`` reserves the request in its key, team and alias scopes (RPM, TPM with the
estimated prompt tokens + ``max_tokens``, parallel, budget) and refuses with 429 and
``Retry-After`` / ``x-ratelimit-*`` headers. Where `Headroom` says a refusal is unlikely, the
reservation is only sent: its answer opens or closes the request's `GatewayRequest.gate`,
which the dispatcher waits for after sending the upstream call (one round trip fewer on the
request's path); a refusal then aborts the upstream call and the client gets the same 429.
``after`` hands the settle (actual usage) to `Settles` and spools the spend record and the
audit row in one append: for a JSON response before it is written, for a stream once it has
ended. A stream that holds a full parallel slot settles earlier, just before its end leaves
(`GatewayRequest.at_end`). No other I/O on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any

from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.contract.tool import ToolCall
from fleetgate.errors import BudgetExceeded, FleetgateError, LimiterUnavailable, RateLimited
from fleetgate.limits.base import Denial, Limiter, Reservation, Scope
from fleetgate.telemetry.registry import Counter
from fleetgate.tenancy.budgets import Budgets
from fleetgate.tenancy.cache import KeyCache
from fleetgate.tenancy.headers import duration, ratelimit_headers
from fleetgate.tenancy.headroom import Headroom
from fleetgate.tenancy.key_use import KeyUse
from fleetgate.tenancy.money import outcome_cost_nusd
from fleetgate.tenancy.scopes import ScopeBook
from fleetgate.tenancy.settles import Settles
from fleetgate.tenancy.usage_metrics import SpendMetrics
from fleetgate.tenancy.writer import RecordWriter

__all__ = ["TenancyStage"]

log = logging.getLogger("fleetgate.tenancy")

_RESERVATION = "tenancy.reservation"
_ENDED = "tenancy.ended"  # (tokens, cost) for an overlapped reservation answered after the end
_REFUSED = "tenancy.refused"  # an overlapped reservation was refused (its audit row written)
_NEVER_MS = 400 * 86_400_000  # longer than any calendar period: the budget never resets


def _call_scopes(call: ToolCall) -> tuple[Scope, ...]:
    """The scopes of a tool call's own limits (`fleetgate.contract.tool.CallLimit`)."""
    return tuple(
        Scope(limit.scope, limit.rpm, None, limit.max_parallel)
        for limit in call.limits
        if limit.rpm is not None or limit.max_parallel is not None
    )


def _used(outcome: Outcome, reservation: Reservation) -> int:
    """The tokens a reservation is settled with: the outcome's, or, for an answer whose usage
    is unknown, what was reserved."""
    used = outcome.prompt_tokens + outcome.completion_tokens
    return reservation.tokens if outcome.status < 400 and used == 0 else used


class TenancyStage:
    """The `fleetgate.contract.stages.Stage` of tenancy: limits, budgets, spend and audit."""

    name = "tenancy"

    def __init__(
        self,
        cache: KeyCache,
        limiter: Limiter,
        scopes: ScopeBook,
        writer: RecordWriter,
        budgets: Budgets,
        *,
        audit_requests: bool = True,
        settles: Settles | None = None,
        key_use: KeyUse | None = None,
        usage: SpendMetrics | None = None,
        overlap: bool = True,
        overlapped: Counter | None = None,
    ) -> None:
        self.cache = cache
        self.limiter = limiter
        self.scopes = scopes
        self.writer = writer
        self.budgets = budgets
        self.audit_requests = audit_requests
        self.settles = settles or Settles(limiter, budgets.settled)
        self.usage = usage
        self.key_use = key_use  # keys' last use, noted in memory (written in the background)
        # Overlap the reservation's round trip with the upstream call where `Headroom` says a
        # refusal is unlikely (`tenancy.overlap_reserve`); False: always reserve, then send.
        self.overlap = overlap
        self.room = Headroom(budgets.known_spend)
        self._overlapped = overlapped  # label ``answer``: granted, refused, unavailable

    async def before(self, req: GatewayRequest) -> None:
        entry = self.cache.entry(req.principal.key_id)
        if entry is not None and self.key_use is not None:
            self.key_use.seen(entry.id)
        team_id = req.principal.team_id
        if self.audit_requests and team_id:
            team = self.cache.team(team_id)
            req.capture_response = team is not None and team.log_payloads
        scopes = self.scopes.scopes(entry, req.alias)
        if req.tool is not None:  # a tool call: no tokens, and its server's own limits too
            scopes = (*scopes, *_call_scopes(req.tool))
            tokens = 0
        else:
            # The prompt estimate is a heuristic; pad it (chat template, tokenizer differences)
            # so a reservation covers the real count and TPM overshoots by at most one request.
            tokens = req.prompt_tokens + req.prompt_tokens // 4 + 16 + req.max_tokens
        if not scopes:
            return
        # The request id is the gateway's own (a random per-process prefix and a counter), so
        # it names the reservation uniquely across replicas without a random suffix.
        if self.overlap and self.room.allows(scopes, tokens):
            sent = self.limiter.reserve_sent(req.request_id, scopes, tokens)
            if sent is not None:  # answered while the upstream call is sent: `_answered`
                gate: asyncio.Future[None] = sent.get_loop().create_future()
                req.gate = gate
                self.room.sent(scopes, tokens)
                sent.add_done_callback(partial(self._answered, req, scopes, tokens, gate))
                return
        try:
            result = await self.limiter.reserve(req.request_id, scopes, tokens)
        except LimiterUnavailable as exc:  # fail_closed: audited, as when overlapped
            audit = self._audit_row(req, "error", exc.status, exc.type, None)
            if audit is not None:
                self.writer.submit("audit", audit)
            raise
        if isinstance(result, Denial):
            self.room.refused(scopes)
            raise self._refusal(req, result)
        self._admitted(req, scopes, result)

    def _admitted(
        self, req: GatewayRequest, scopes: tuple[Scope, ...], reservation: Reservation
    ) -> None:
        self.room.granted(scopes, reservation)
        req.state[_RESERVATION] = reservation
        if reservation.crowded and reservation.enforced:
            # a full parallel slot: a streamed reply frees it before its end leaves (a JSON
            # answer's ``after`` runs before it is written: `end_reply` is never called)
            if req.at_end is None:
                req.at_end = [self._settle_at_end]
            else:
                req.at_end.append(self._settle_at_end)
        if reservation.usage:
            req.response_headers.update(ratelimit_headers(scopes, reservation.usage))

    def _answered(
        self,
        req: GatewayRequest,
        scopes: tuple[Scope, ...],
        tokens: int,
        gate: asyncio.Future[None],
        sent: asyncio.Future[Reservation | Denial],
    ) -> None:
        """The overlapped reservation's answer (a reply callback, on the loop): open the
        request's gate, or close it with the refusal. When the request already ended
        (``after`` ran: cancelled, or failed before anyone waited), a grant is settled at
        once with what ``after`` computed, and a refusal changes nothing."""
        self.room.answered(scopes, tokens)
        ended = req.state.get(_ENDED)
        result: Reservation | Denial | BaseException
        if sent.cancelled():
            result = LimiterUnavailable("Rate limiting is unavailable; try again shortly.")
        else:
            result = sent.exception() or sent.result()
        if self._overlapped is not None:
            answer = (
                "granted"
                if isinstance(result, Reservation)
                else "refused"
                if isinstance(result, Denial)
                else "unavailable"
            )
            self._overlapped.labels(answer).inc()
        if isinstance(result, Reservation):
            if ended is not None:
                self.room.granted(scopes, result)
                self._settle(result, *ended)
                return
            self._admitted(req, scopes, result)
            if not gate.done():
                gate.set_result(None)
            return
        if isinstance(result, Denial):
            self.room.refused(scopes)
            if ended is not None:
                return
            error: BaseException = self._refusal(req, result)
            req.state[_REFUSED] = True
        else:
            error = result  # the limiter is unavailable and fails closed
            if ended is not None:
                return
        if not gate.done():
            gate.set_exception(error)

    def _refusal(self, req: GatewayRequest, denial: Denial) -> FleetgateError:
        """The error refusing ``req`` for ``denial``, its audit row written."""
        retry_s = denial.retry_after_ms / 1000
        headers = {f"x-ratelimit-reset-{denial.reason}": duration(denial.retry_after_ms)}
        if denial.reason in ("requests", "tokens"):
            headers[f"x-ratelimit-remaining-{denial.reason}"] = "0"
        audit = self._audit_row(req, "refused_" + denial.reason, 429, "rate_limit_error", None)
        if audit is not None:
            self.writer.submit("audit", audit)
        if denial.reason == "budget":
            if denial.retry_after_ms > _NEVER_MS:  # a `total` budget: no retry will succeed
                exc = BudgetExceeded(
                    f"Budget exhausted for {denial.scope.split(':')[0]}; it does not reset.",
                )
                exc.headers.pop("Retry-After", None)
                return exc
            return BudgetExceeded(
                f"Budget exhausted for {denial.scope.split(':')[0]}; it resets with the period.",
                retry_after=retry_s,
                headers=headers,
            )
        return RateLimited(
            f"Rate limit reached for {denial.scope.split(':')[0]} ({denial.reason}); "
            f"retry in {duration(denial.retry_after_ms)}.",
            retry_after=retry_s,
            headers=headers,
        )

    def _settle_at_end(self, req: GatewayRequest) -> None:
        """A stream's `GatewayRequest.at_end`: its reservation settled with what the stream
        told, before its end leaves (``after`` then finds nothing to settle)."""
        reservation = req.state.pop(_RESERVATION, None)
        if isinstance(reservation, Reservation):
            outcome = req.outcome
            self._settle(reservation, _used(outcome, reservation), outcome_cost_nusd(outcome), req)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        cost = outcome_cost_nusd(outcome)
        reservation = req.state.pop(_RESERVATION, None)
        used = outcome.prompt_tokens + outcome.completion_tokens
        if isinstance(reservation, Reservation):
            used = _used(outcome, reservation)
            self._settle(reservation, used, cost, req)
        gate = req.gate
        if gate is not None:  # an overlapped reservation nobody waited for (cancelled)
            if not gate.done():
                req.state[_ENDED] = (used, cost)  # settled when its answer comes
            elif not gate.cancelled():
                gate.exception()  # retrieved: its refusal has nobody to reach
        if req.state.get(_REFUSED):
            return  # refused: its audit row says so, and no upstream answer was used
        records: list[tuple[str, dict[str, Any]]] = []
        if outcome.deployment is not None:
            row = self._spend_row(req, outcome, cost)
            records.append(("spend", row))
            if self.usage is not None:
                self.usage.record(req.principal.team_id, str(row["alias"] or ""), cost)
        decision = "allowed" if outcome.status < 400 else "error"
        if decision == "allowed" and outcome.finish_reason == "content_filter":
            decision = "blocked"  # an output check (or the upstream's filter) stopped the reply
        decision = outcome.decision or decision  # named by the path (a tool call's mask)
        audit = self._audit_row(req, decision, outcome.status, outcome.error_type, outcome)
        if audit is not None:
            records.append(("audit", audit))
        self.writer.submit_all(records)  # one append: both durable before the response

    def _settle(
        self, reservation: Reservation, used: int, cost: int, req: GatewayRequest | None = None
    ) -> None:
        self.room.released(reservation.scopes)
        # Also when the reservation was not enforced (Redis away, fail_open): the cost still
        # belongs in the budget counters once Redis is back.
        settled = self.settles.submit(reservation, used, cost)
        if req is not None and reservation.crowded and reservation.enforced:
            # a full parallel slot: freed in the shared store before the client has the reply
            # (`StageRun` waits for it, bounded), so its next request, to any replica, finds it
            if req.reply_after is None:
                req.reply_after = [settled]
            else:
                req.reply_after.append(settled)

    async def drain(self) -> None:
        """Wait for settles still running, and try the queued ones (shutdown)."""
        await self.settles.drain()

    def _spend_row(self, req: GatewayRequest, outcome: Outcome, cost: int) -> dict[str, Any]:
        p = req.principal
        return {
            "request_id": req.request_id,
            "created_ms": int((req.received_at or time.time()) * 1000),
            "key_id": p.key_id,
            "team_id": p.team_id,
            "alias": outcome.alias or req.alias,
            "deployment": outcome.deployment,
            "version": outcome.version,
            "status": outcome.status,
            "input_tokens": outcome.prompt_tokens,
            "output_tokens": outcome.completion_tokens,
            "cached_tokens": outcome.cached_tokens,
            "cache_write_tokens": outcome.cache_write_tokens,
            "cost_nusd": cost,
            "latency_ms": int(outcome.latency_s * 1000),
            "tags": {**dict(p.tags), **outcome.tags},
        }

    def _audit_row(
        self,
        req: GatewayRequest,
        decision: str,
        status: int,
        error_type: str | None,
        outcome: Outcome | None,
    ) -> dict[str, Any] | None:
        if not self.audit_requests:
            return None
        p = req.principal
        team = self.cache.team(p.team_id) if p.team_id else None
        full = team is not None and team.log_payloads
        return {
            "request_id": req.request_id,
            "created_ms": int((req.received_at or time.time()) * 1000),
            "key_id": p.key_id,
            "team_id": p.team_id,
            "alias": req.alias,
            "decision": decision,
            "status": status,
            "error_type": error_type,
            "prompt": req.body if full else None,
            "response": outcome.response_text if full and outcome is not None else None,
        }
