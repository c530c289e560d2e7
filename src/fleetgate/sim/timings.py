"""``GET /sim/timings``: where each of the last model requests spent its time in the engine.

One record per request, written when it ends (finished, aborted or cut off), oldest first:
its ``x-request-id`` (the gateway forwards its own), its ``priority``, the engine's running
and waiting counts when it arrived, and the times (the event loop's clock, which is
``time.monotonic()``: the same clock as any other process on the host) it arrived, was first
scheduled, produced its first token and ended, the tokens it generated (a cut request's
too: the work it cost) and how often it was preempted. A benchmark
joins them with what its client measured, to tell a gateway's queue from the engine's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from typing import Any

import orjson
from aiohttp import web

from fleetgate.sim.sequence import Sequence
from fleetgate.sim.state import SIM_STATE

__all__ = ["record_timing", "timing_routes"]


def record_timing(
    timings: deque[dict[str, Any]],
    request_id: str | None,
    seqs: Seq[Sequence],
    at_arrival: tuple[int, int],
    now: float,
) -> None:
    """Append the record of one request (its first sequence's times) to ``timings``."""
    if not seqs:
        return
    first = seqs[0]
    timings.append(
        {
            "request_id": request_id,
            "priority": first.spec.priority,
            "running_at_arrival": at_arrival[0],
            "waiting_at_arrival": at_arrival[1],
            "arrival": first.arrival,
            "scheduled": first.scheduled_at,
            "first_token": first.first_token_at,
            "ended": now,
            "generated": sum(s.num_generated for s in seqs),
            "preemptions": sum(s.preemptions for s in seqs),
        }
    )


async def _timings(request: web.Request) -> web.Response:
    body = orjson.dumps(list(request.app[SIM_STATE].timings))
    return web.Response(body=body, content_type="application/json")


def timing_routes() -> list[web.RouteDef]:
    return [web.get("/sim/timings", _timings)]
