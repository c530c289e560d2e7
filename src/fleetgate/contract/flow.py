"""The request's control flow besides the plain path, one function for each turn it can take.

Six fields of `fleetgate.contract.request.GatewayRequest` turn the path, and this module is
where each one is handled:

- **gate**: a check a stage started and did not wait for (tenancy's reservation, in flight to
  Redis while the request goes on). `pass_gate` waits for it and raises its refusal;
  `until_refused` stops whatever the request waits on meanwhile (a stage's queue, the send
  upstream) the moment it refuses; `refused` tells whether it has.
- **interrupt**: a stage cancels the request's task on purpose (the scheduler preempting it)
  through an `interrupter`; `interrupted` takes the interrupt back out of the cancellation.
- **requeue**: after an interrupt before the first byte, the way back into that stage's queue.
- **answer**: a stage answered the request itself (a response cache hit): nothing goes
  upstream.
- **reply_after**: what must be done before the reply leaves (a settle that frees a full
  parallel slot in the shared store); `hold_reply` waits for it, bounded.
- **at_end**: what runs once a streamed answer is complete, before its end leaves (that same
  settle, for a stream); `end_reply` runs it and holds the end for what it adds to
  ``reply_after``.

`respond` puts the last three together for a route: the stage's answer replayed, or the
upstream call, sent again after each interrupt that may be undone.

Example::

    response = await respond(req, send=lambda: dispatch(req), replay=lambda: replay(req))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from fleetgate.contract.request import GatewayRequest
from fleetgate.errors import FleetgateError

__all__ = [
    "REPLY_HOLD_S",
    "Gated",
    "end_reply",
    "interrupted",
    "interrupter",
    "hold_reply",
    "pass_gate",
    "refused",
    "respond",
    "until_refused",
]

_T = TypeVar("_T")


REPLY_HOLD_S = 0.25  # the longest a reply waits for its ``reply_after`` (a slow store)


async def hold_reply(req: GatewayRequest, limit_s: float = REPLY_HOLD_S) -> None:
    """Wait for ``req.reply_after`` (at most ``limit_s``) and clear it. Their outcomes are
    their owners' (a failed settle is queued and retried by tenancy): nothing is raised here,
    and what is still running after ``limit_s`` goes on without the reply."""
    waits, req.reply_after = req.reply_after, None
    if waits:
        await asyncio.wait(waits, timeout=limit_s)


async def end_reply(req: GatewayRequest) -> None:
    """Called by a streamed reply's writer just before its end leaves (and never for a JSON
    answer): run ``req.at_end`` once, then wait for what it added to ``req.reply_after``
    (bounded, as `hold_reply`). A stream's stages' ``after`` runs only once the response has
    ended, too late for a client that reads the end and sends its next request at once."""
    ends, req.at_end = req.at_end, None
    if ends:
        for end in ends:
            end(req)
    if req.reply_after is not None:
        await hold_reply(req)


class Gated(Protocol):
    """A request that may carry a gate (`GatewayRequest` and routing's view of it)."""

    # A check still in flight that must pass before any answer leaves; its result is None, a
    # refusal is its exception. Whoever waits for it (`pass_gate`) sets it to None.
    gate: asyncio.Future[None] | None


async def pass_gate(req: Gated) -> None:
    """Wait for ``req.gate`` and clear it; raises the gate's refusal. A cancellation of the
    wait (a preemption that requeues the request, the client leaving) leaves the gate on the
    request for whoever waits next, unharmed."""
    gate = req.gate
    if gate is None:
        return
    if not gate.done():
        await asyncio.shield(gate)
    req.gate = None
    gate.result()


def refused(gate: asyncio.Future[None] | None) -> bool:
    """Whether ``gate`` has closed with a refusal."""
    return gate is not None and gate.done() and not gate.cancelled() and bool(gate.exception())


async def until_refused(gate: asyncio.Future[None] | None, work: Awaitable[_T]) -> _T:
    """``await work``, stopped at once if ``gate`` (a check still in flight) closes with a
    refusal meanwhile: the task is cancelled where it waits (a send upstream, a stage's wait
    in the admission queue) and the refusal raised instead. The gate is left on the request
    (`pass_gate` clears it)."""
    if gate is None or gate.done():
        return await work
    task = asyncio.current_task()
    waiting, stopped = True, False

    def stop(done: asyncio.Future[None]) -> None:
        nonlocal stopped
        # Only while ``work`` is awaited: a callback run after it returned cancels nothing.
        if waiting and task is not None and not done.cancelled() and done.exception():
            stopped = True
            task.cancel()

    gate.add_done_callback(stop)
    try:
        return await work
    except asyncio.CancelledError:
        if stopped and task is not None and task.uncancel() == 0:
            error = gate.exception()
            assert error is not None
            raise error from None
        raise
    finally:
        waiting = False
        gate.remove_done_callback(stop)


def interrupter(req: GatewayRequest, task: asyncio.Task[Any]) -> Callable[[FleetgateError], None]:
    """How a stage ends ``req`` at once with an error: its ``task`` is cancelled, and the relay
    (or, before the first byte, the route: `respond`) turns the cancellation into ``error``
    (`GatewayRequest.interrupt`, taken by `interrupted`); leaving the dispatch block closes the
    upstream response, which aborts the engine's request and frees its slot. A response
    already complete (`Outcome.settled`), or already interrupted, is left alone."""

    def interrupt(error: FleetgateError) -> None:
        if req.interrupt is None and not req.outcome.settled and not task.done():
            req.interrupt = error
            task.cancel()

    return interrupt


def interrupted(req: GatewayRequest) -> FleetgateError | None:
    """In an ``except asyncio.CancelledError``: the error a stage cancelled ``req``'s task with
    on purpose (`GatewayRequest.interrupt`), with the cancellation taken back; None when
    something else cancelled it too (the client went away, shutdown), or when the interrupt
    was taken already: then it must propagate. The interrupt is taken either way."""
    interrupt = req.interrupt
    task = asyncio.current_task()
    if interrupt is None or task is None:
        return None
    req.interrupt = None  # taken: a later cancellation (the client going away) propagates
    if task.uncancel() > 0:
        return None
    return interrupt


async def respond(
    req: GatewayRequest,
    send: Callable[[], Awaitable[_T]],
    replay: Callable[[], Awaitable[_T]],
) -> _T:
    """The request's answer once its stages ran: ``replay()`` when a stage answered it
    (``req.answer``), else ``send()`` (the upstream call and relay).

    When a stage interrupts the send before the first byte and left a way back
    (``req.requeue``), the request goes back through that stage (left at once if its gate
    refuses meanwhile) and is sent again; without one the client gets the interrupt's error.
    Once the relay began, an interrupt ends the stream (the relay writes it) and is never
    answered twice."""
    if req.answer is not None:
        return await replay()
    while True:
        try:
            return await send()
        except asyncio.CancelledError:
            interrupt = interrupted(req)  # preempted before its first byte
            if interrupt is None:
                raise
            if req.outcome.first_token_at is not None:  # the relay began: never answered twice
                raise
            requeue = req.requeue
            if requeue is None:
                raise interrupt from None
        if refused(req.gate):
            await pass_gate(req)  # refused meanwhile: it ends here, not back in the queue
        # back in the admission queue (left at once if its reservation is refused meanwhile);
        # then sent again
        await until_refused(req.gate, requeue())
