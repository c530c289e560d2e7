"""Request stages: how limits, guardrails, multimodal processing and billing join the path.

A `Stage` sees each model request twice: ``before`` the upstream call (it may rewrite the
body or alias, add response headers, or raise a `fleetgate.errors.FleetgateError` to refuse)
and ``after`` it with the `Outcome` (settle limits, record spend, audit). Stages run
``before`` in order and ``after`` in reverse order; a stage whose ``before`` ran always gets
its ``after``, even when a later stage or the upstream failed, so reservations are released.
Every endpoint (chat, completions, embeddings, the ``/v1/messages`` front door, audio) runs
its stages through one `StageRun`.

``after`` runs on the event loop right after the response: it must not block; queue I/O.

Example::

    class CountingStage:
        name = "counting"

        async def before(self, req: GatewayRequest) -> None:
            req.response_headers["x-seen"] = "1"

        def after(self, req: GatewayRequest, outcome: Outcome) -> None:
            print(outcome.status, outcome.completion_tokens)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Protocol

from fleetgate.contract.flow import hold_reply, pass_gate, until_refused
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import FleetgateError

__all__ = ["Stage", "StageRun"]


class Stage(Protocol):
    """A step of the request path around the upstream call."""

    name: str

    async def before(self, req: GatewayRequest) -> None: ...

    def after(self, req: GatewayRequest, outcome: Outcome) -> None: ...


class StageRun:
    """The stages around one request, as an async context manager: ``before`` of each stage in
    order on entry, up to the stage that answers the request itself if one does (a cache hit);
    on exit, however the block (or a ``before``) ended, the outcome's end is written,
    ``record`` is called, then ``after`` in reverse for exactly the stages whose ``before``
    completed (so a stage that reserved something always settles).

    How it ended: a `fleetgate.errors.FleetgateError` gives the outcome its status and type and
    carries the stages' response headers; a cancellation is 499 ``client_disconnected``; any
    other exception is 500 ``internal_error``. The exception always propagates: the one error
    handler (``api/errors.py``) renders it (and logs the unexpected ones).

    Example::

        async with StageRun(stages, req, record=write_access_log) as outcome:
            ...  # the upstream call; fill in ``outcome``
    """

    __slots__ = ("_ran", "overlap", "record", "req", "stages")

    def __init__(
        self,
        stages: Sequence[Stage],
        req: GatewayRequest,
        record: Callable[[GatewayRequest], None] | None = None,
        *,
        overlap: bool = False,
    ) -> None:
        self.stages = stages
        self.req = req
        self.record = record  # metrics, access log, trace: before the stages' ``after``
        # True: the block sends the request upstream through the dispatcher, which waits for
        # the request's `GatewayRequest.gate` after the send; False: it is waited for here,
        # before the block runs.
        self.overlap = overlap
        self._ran: list[Stage] = []

    async def __aenter__(self) -> Outcome:
        req = self.req
        req.outcome.alias = req.alias  # as asked, should a stage refuse
        trace = req.outcome.span  # a `fleetgate.telemetry.tracing.RequestTrace`, or None
        try:
            for stage in self.stages:
                if req.answer is not None:  # a stage answered (a cache hit): nothing goes
                    break  # upstream, so the stages after it (admission) have nothing to do
                if req.gate is not None and req.gate.done():
                    # answered meanwhile: a refusal ends the request here, as it would have
                    # before these stages (no queueing for a pool slot, no further checks)
                    await pass_gate(req)
                streams = tuple(req.stream_filters) if req.stream_filters else ()
                responses = tuple(req.response_filters) if req.response_filters else ()
                # a refusal that comes while a stage waits (the admission queue) ends the wait
                if trace is not None:
                    with trace.stage(stage.name):  # one span per stage, under the request's
                        await _before(stage, req)
                elif req.gate is None:  # no check in flight (most requests): no frame between
                    await stage.before(req)
                else:
                    await _before(stage, req)
                self._ran.append(stage)
                if streams and len(req.stream_filters) != len(streams):
                    _inner_first(req.stream_filters, streams)
                if responses and len(req.response_filters) != len(responses):
                    _inner_first(req.response_filters, responses)
            gate = req.gate
            if gate is not None and (gate.done() or not self.overlap or req.answer is not None):
                await pass_gate(req)  # answered, or nothing to overlap it with: wait for it now
        except BaseException as exc:
            verdict = await self._verdict(exc)
            self._end(verdict)
            if self.req.reply_after is not None and not isinstance(verdict, asyncio.CancelledError):
                await hold_reply(self.req)  # a refusal's reply waits too (a later stage refused)
            if verdict is exc or verdict is None:
                raise
            raise verdict from None
        req.outcome.alias = req.alias
        return req.outcome

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        verdict = await self._verdict(exc) if self.req.gate is not None else exc
        self._end(verdict)
        if self.req.reply_after is not None and not isinstance(verdict, asyncio.CancelledError):
            await hold_reply(self.req)  # a full slot's settle, before the client has the reply
        if verdict is not exc and verdict is not None:
            raise verdict from None

    async def _verdict(self, exc: BaseException | None) -> BaseException | None:
        """How the request ended, given a gate nobody waited for: its refusal outranks what
        the request met later (it was never admitted), so it is waited for here. Not when
        the request was cancelled: the gate's stage handles a late answer in ``after``."""
        if self.req.gate is None or isinstance(exc, asyncio.CancelledError):
            return exc
        try:
            await pass_gate(self.req)
        except asyncio.CancelledError as cancelled:
            return cancelled  # cancelled while waiting: the request ends as cancelled
        except Exception as refusal:
            return refusal
        return exc

    def _end(self, exc: BaseException | None) -> None:
        req = self.req
        outcome = req.outcome
        now = time.perf_counter()
        if exc is not None:
            _failed(req, exc, now)
        outcome.latency_s = now - req.started
        if outcome.deployment is not None:  # an upstream worked on it: bill what we know
            if not outcome.prompt_tokens:
                outcome.prompt_tokens = req.prompt_tokens  # no usage (abandoned, cut): estimate
            if not outcome.completion_tokens:
                outcome.completion_tokens = outcome.relayed
        if outcome.first_token_at is not None:
            outcome.ttft_s = outcome.first_token_at - req.started
        ran, self._ran = self._ran, []
        try:
            if self.record is not None:
                self.record(req)
        finally:
            for stage in reversed(ran):
                stage.after(req, outcome)


def _before(stage: Stage, req: GatewayRequest) -> Awaitable[None]:
    """``stage.before(req)``; while ``req.gate`` is in flight, stopped by its refusal."""
    work = stage.before(req)
    gate = req.gate
    if gate is None or gate.done():
        return work
    return until_refused(gate, work)


def _inner_first(filters: list[Any], earlier: tuple[Any, ...]) -> None:
    """Put the filters the last stage added ahead of the ones earlier stages added.

    A response travels the stages inside out: the stage nearest the upstream (the last one)
    sees it first, as ``after`` runs in reverse. So what the guardrails (a later stage) hold
    back, cut or replace never reaches an earlier stage's speech synthesis or conversation
    memory. The added filters keep their own order."""
    seen = {id(f) for f in earlier}
    filters[:] = [*(f for f in filters if id(f) not in seen), *earlier]


def _failed(req: GatewayRequest, exc: BaseException, now: float) -> None:
    """Mark ``req``'s outcome with how ``exc`` ended it."""
    outcome = req.outcome
    if isinstance(exc, asyncio.CancelledError):
        outcome.status, outcome.error_type = 499, "client_disconnected"
        return
    if isinstance(exc, FleetgateError):
        outcome.status, outcome.error_type = exc.status, exc.type
        if req.response_headers:
            exc.headers.update(req.response_headers)
    elif isinstance(exc, Exception):
        outcome.status, outcome.error_type = 500, "internal_error"
    else:
        return
    if outcome.deployment is None:  # never reached an upstream: all of it was ours
        outcome.overhead_s = now - req.started
