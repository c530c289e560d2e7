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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from fleetgate.contract.flow import interrupter
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import FleetgateError
from fleetgate.routing.deployment import Deployment
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.scheduler import Scheduler

__all__ = ["PriorityHook", "SchedulingStage", "engine_priority"]

_STATE = "scheduling"


# How many times a request preempted before its first byte goes back to the queue; the next
# preemption answers it with the retryable 503 (``preempted_in_flight``, Retry-After).
MAX_REQUEUES = 3

# The longest a claim waits for the stream it cancelled to end before it is sent (`_AfterCut`):
# a cancelled stream ends within a few loop iterations; this only bounds a stuck one.
CUT_WAIT_S = 0.1


@dataclass(slots=True)
class _Admission:
    pool: Pool
    running: Running
    at: float  # time.perf_counter() when admitted
    hooks: tuple[Any, ...] = ()  # the dispatch hooks this admission added
    requeues: int = 0  # times this request was requeued so far


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


class _OnSend:
    """A dispatch hook that only acts as the request is sent (`admit`): no preference among
    the deployments, no extra body field."""

    __slots__ = ()

    def prefer(self, candidates: Sequence[Deployment]) -> Sequence[Deployment]:
        return ()

    def extra_body(self, dep: Deployment) -> Mapping[str, Any] | None:
        return None


class _ArmOnSend(_OnSend):
    """Arms the preemption of a stream (`Running.abort`) when it is sent upstream, so that a
    cancellation lands in the dispatch or the relay, never in a later stage's ``before``."""

    __slots__ = ("_abort", "_running")

    def __init__(self, running: Running, abort: Callable[[FleetgateError], None]) -> None:
        self._running = running
        self._abort = abort

    def admit(self, dep: Deployment) -> AbstractAsyncContextManager[None]:
        running = self._running
        if running.abort is None:
            running.abort = self._abort
            if running.cancel is not None:  # chosen before it was sent: it ends at the send
                self._abort(running.cancel)
        return contextlib.nullcontext()


class _AfterCut(_OnSend):
    """Sends a claim that cancelled a stream as it started over the limit (`Running.cut`)
    once that stream has ended (its upstream request closed: the engine freed the slot), not
    beside it, so the engines never hold both; it waits `CUT_WAIT_S` at most."""

    __slots__ = ("_pool", "_victim")

    def __init__(self, pool: Pool, victim: Running) -> None:
        self._pool = pool
        self._victim = victim

    @contextlib.asynccontextmanager
    async def admit(self, dep: Deployment) -> AsyncIterator[None]:
        victim = self._victim
        if victim in self._pool.running:  # not ended yet
            if victim.gone is None:
                victim.gone = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(victim.gone), CUT_WAIT_S)
        yield


class SchedulingStage:
    name = "scheduling"

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def before(self, req: GatewayRequest) -> None:
        scheduler = self.scheduler
        pool = scheduler.pool(req.alias)
        if pool is None:
            return
        policy = scheduler.policies.of(req.principal, req.headers).for_request(req.stream)
        reclaim = scheduler.within(pool, policy)
        if not scheduler.try_admit(pool, policy, req.prompt_tokens):
            await self._queue(req, pool, policy, req.prompt_tokens)
            reclaim = scheduler.admitted_within(pool, policy)  # as it stands once admitted
        self._start(req, pool, policy, reclaim, 0)

    async def _queue(
        self, req: GatewayRequest, pool: Pool, policy: RequestPolicy, tokens: int
    ) -> None:
        elapsed = time.perf_counter() - req.started
        waited = await self.scheduler.wait(pool, policy, tokens, elapsed)
        req.response_headers["x-fleetgate-queue-ms"] = f"{waited * 1000:.1f}"

    def _start(
        self, req: GatewayRequest, pool: Pool, policy: RequestPolicy, reclaim: bool, requeues: int
    ) -> None:
        """Track the admitted request until `after` (``reclaim``: it is a claim within its
        team's guarantee or nominal quota); a stream may be cancelled at once (`interrupter`,
        armed when it is sent upstream) and, before its first byte, requeued (`_requeue`, at
        most `MAX_REQUEUES` times)."""
        scheduler = self.scheduler
        running = scheduler.started(pool, policy, req.outcome, reclaim, req.max_tokens)
        if req.stream and req.max_tokens > 1 and scheduler.config.start_before_end:
            out = req.outcome  # its slot goes to the next request at its last chunk but one
            out.at_chunk = req.max_tokens - 1
            out.on_chunk = functools.partial(scheduler.end_in_sight, pool, running)
        hooks: list[Any] = []
        if running.cancellable:
            task = asyncio.current_task()
            if req.stream and task is not None:  # the relay keeps its byte-for-byte fast path
                hooks.append(_ArmOnSend(running, interrupter(req, task)))
                if requeues < MAX_REQUEUES:
                    running.requeue = True
                    req.requeue = functools.partial(self._requeue, req, policy)
                else:
                    req.requeue = None
            else:
                running.cancellable = False  # a whole response: nothing to end it cleanly with
        cut, running.cut = running.cut, None
        if cut is not None and cut.abort is not None:  # it was at the engine
            hooks.append(_AfterCut(pool, cut))
        if pool.takes_priority:
            hooks.append(PriorityHook(engine_priority(policy.rank, reclaim)))
        req.dispatch_hooks.extend(hooks)
        req.state[_STATE] = _Admission(pool, running, time.perf_counter(), tuple(hooks), requeues)

    async def _requeue(self, req: GatewayRequest, policy: RequestPolicy) -> None:
        """``req`` was cancelled before its first byte (`GatewayRequest.requeue`): it gives its
        slot up and goes back through admission (its prompt is not charged twice); its
        engine priority is that of its new admission."""
        admission: _Admission | None = req.state.pop(_STATE, None)
        if admission is None:
            return
        scheduler, pool = self.scheduler, admission.pool
        scheduler.finish(pool, admission.running, 0, None)
        req.requeue = None
        stale = {id(h) for h in admission.hooks}
        req.dispatch_hooks[:] = [h for h in req.dispatch_hooks if id(h) not in stale]
        reclaim = scheduler.within(pool, policy)
        if not scheduler.try_admit(pool, policy, 0):
            await self._queue(req, pool, policy, 0)
            reclaim = scheduler.admitted_within(pool, policy)
        self._start(req, pool, policy, reclaim, admission.requeues + 1)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        admission: _Admission | None = req.state.pop(_STATE, None)
        if admission is None:
            return
        held = time.perf_counter() - admission.at
        self.scheduler.finish(admission.pool, admission.running, outcome.completion_tokens, held)
