"""The ``scheduling`` stage: admission into the deployment pool, last before dispatch.

It runs after every stage that may refuse or reshape the request (tenancy's limits, the
multimodal prompt assembly, the guardrails), so a request holds a slot of its pool only once
nothing but the engine is left, and its prompt tokens are the ones the engine will see. Its
``after`` runs first on the way out (the stages' ``after`` run in reverse), when the response
is complete: the slot is freed and the output tokens charged to the team.

The pool is the alias's own deployments (`RouteTable.route`), resolved after the semantic
router chose the alias. A request that falls back to another alias keeps the slot it was
admitted with: the fallback is the dispatcher's business, within one admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.hooks import GatewayRequest, Outcome
from fleetgate.routing.deployment import Deployment
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.scheduler import Scheduler

__all__ = ["PriorityHook", "SchedulingStage", "engine_priority"]

_STATE = "scheduling"


@dataclass(slots=True)
class _Admission:
    pool: Pool
    running: Running
    at: float  # time.perf_counter() when admitted


def engine_priority(rank: int, guaranteed: bool) -> int:
    """vLLM's ``priority`` (lower runs first) for a band's rank (0 critical ... 3 sheddable):
    ``2 * rank + 1``, and ``2 * rank`` for a request within its team's guarantee. vLLM v1 takes
    its waiting requests in this order and, when its KV cache runs out, preempts the least
    important; it never preempts a running request for a sequence slot, so a request that
    finds the engine's batch full still waits for one to end (the pool's headroom,
    ``critical_reserve``, keeps slots free for the critical band and guarantees)."""
    return 2 * rank + (0 if guaranteed else 1)


class PriorityHook:
    """Sends `engine_priority` as vLLM's ``priority`` to deployments with ``priority: true``."""

    __slots__ = ("_fields",)

    def __init__(self, priority: int) -> None:
        self._fields = {"priority": priority}

    def prefer(self, candidates: Sequence[Deployment]) -> Sequence[Deployment]:
        return ()

    def extra_body(self, dep: Deployment) -> Mapping[str, Any] | None:
        return self._fields if dep.config.priority else None

    def admit(self, dep: Deployment) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


def _aborter(req: GatewayRequest, task: asyncio.Task[Any]) -> Callable[[FleetgateError], None]:
    """Ends ``req`` at once with an error: its task is cancelled, and the relay (or, before the
    first byte, the route) turns the cancellation into ``error`` (`GatewayRequest.interrupt`);
    leaving the dispatch block closes the upstream response, which aborts the engine's
    request and frees its slot."""

    def abort(error: FleetgateError) -> None:
        if req.interrupt is None and not task.done():
            req.interrupt = error
            task.cancel()

    return abort


class SchedulingStage:
    name = "scheduling"

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def before(self, req: GatewayRequest) -> None:
        scheduler = self.scheduler
        pool = scheduler.pool(req.alias)
        if pool is None:
            return
        policy = scheduler.policies.of(req.principal, req.headers)
        reclaim = scheduler.within(pool, policy)
        if not scheduler.try_admit(pool, policy, req.prompt_tokens):
            await self._queue(req, pool, policy, req.prompt_tokens)
        self._start(req, pool, policy, reclaim)
        if pool.takes_priority:
            req.dispatch_hooks.append(PriorityHook(engine_priority(policy.rank, reclaim)))

    async def _queue(
        self, req: GatewayRequest, pool: Pool, policy: RequestPolicy, tokens: int
    ) -> None:
        elapsed = time.perf_counter() - req.started
        waited = await self.scheduler.wait(pool, policy, tokens, elapsed)
        req.response_headers["x-fleetgate-queue-ms"] = f"{waited * 1000:.1f}"

    def _start(self, req: GatewayRequest, pool: Pool, policy: RequestPolicy, reclaim: bool) -> None:
        """Track the admitted request until `after` (``reclaim``: it is a claim within its
        team's guarantee or nominal quota); a stream may be cancelled at once (`_aborter`)
        and, before its first byte, requeued (`_requeue`)."""
        running = self.scheduler.started(pool, policy, req.outcome, reclaim)
        if running.cancellable:
            task = asyncio.current_task()
            if req.stream and task is not None:  # the relay keeps its byte-for-byte fast path
                running.abort = _aborter(req, task)
                req.requeue = functools.partial(self._requeue, req, policy)
            else:
                running.cancellable = False  # a whole response: nothing to end it cleanly with
        req.state[_STATE] = _Admission(pool, running, time.perf_counter())

    async def _requeue(self, req: GatewayRequest, policy: RequestPolicy) -> None:
        """``req`` was cancelled before its first byte (`GatewayRequest.requeue`): it gives its
        slot up and goes back through admission (its prompt is not charged twice)."""
        admission: _Admission | None = req.state.pop(_STATE, None)
        if admission is None:
            return
        scheduler, pool = self.scheduler, admission.pool
        scheduler.finish(pool, admission.running, 0, None)
        req.requeue = None
        reclaim = scheduler.within(pool, policy)
        if not scheduler.try_admit(pool, policy, 0):
            await self._queue(req, pool, policy, 0)
        self._start(req, pool, policy, reclaim)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        admission: _Admission | None = req.state.pop(_STATE, None)
        if admission is None:
            return
        held = time.perf_counter() - admission.at
        self.scheduler.finish(admission.pool, admission.running, outcome.completion_tokens, held)
