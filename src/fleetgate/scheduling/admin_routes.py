"""Admin API of the scheduler.

- ``GET /admin/queues``: every pool's admission state: capacity, limit, admitted, whether its
  engines signal saturation, queued requests per band, and per team its queued requests and
  virtual token counter. The master key sees every team; a team admin key sees its own team
  only (the pools' totals stay visible: they are what its requests wait behind).
  ``?pool=ALIAS`` narrows it to one pool. With quotas configured, ``quotas`` gives each quota
  node's (``team:<id>``, ``org:<name>``) requests in flight and tokens/s (a team admin: its
  own team's and its org's).

With a fleet (admission shared through Redis, `fleetgate.scheduling.fleet`) the counts are the
fleet's, whichever process answers: ``admitted``, each team's ``in_flight``, the quotas' usage
and the virtual token counters (as of the answering process's last sync, plus its own since);
``queued`` is this process's queue and ``queued_elsewhere`` the others'; ``fleet`` names this
process, its lease, whether Redis answers, and every other live process's requests in flight,
lease and queue.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.http import AdminAccess, json_reply
from fleetgate.resp import RespError
from fleetgate.scheduling.config import BANDS
from fleetgate.scheduling.fleet import Fleet
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.scheduler import Scheduler

__all__ = ["SchedulingAdmin", "pool_view"]


def pool_view(pool: Pool, team: str | None, now: float) -> dict[str, Any]:
    queue = pool.queue
    queued = queue.teams()
    teams = sorted(set(queued) | set(pool.vtc.counters) | set(pool.teams))
    if team is not None:
        teams = [t for t in teams if t == team]
    oldest = queue.oldest()
    quotas = None
    if pool.quotas is not None:
        usage = pool.quotas.usage()
        if team is not None:  # a team admin: its own team's node and its org's
            mine = {n.name for n in pool.quotas.chain(team)}
            usage = {name: u for name, u in usage.items() if name in mine}
        quotas = usage
    return {
        "pool": pool.name,
        "capacity": pool.capacity,
        "limit": pool.limit,
        "admitted": pool.admitted,
        "saturated": pool.saturated or queue.size > 0,
        "engines_saturated": pool.signal,
        "queued": dict(zip(BANDS, queue.depth(), strict=True)),
        "oldest_wait_s": None if oldest is None else round(now - oldest, 4),
        "mean_service_s": pool.service_s,
        "quotas": quotas,  # per node ("team:<id>", "org:<name>"): in flight, tokens/s
        # a fleet: this process, its lease and the other processes (None: this process alone)
        "fleet": pool.state.describe(),
        "queued_elsewhere": pool.state.queued_elsewhere,
        "teams": {
            t: {
                "queued": queued.get(t, 0),
                "in_flight": pool.teams.get(t, 0),
                "virtual_tokens": round(pool.vtc.value(t), 3),
            }
            for t in teams
        },
    }


class SchedulingAdmin:
    def __init__(self, scheduler: Scheduler | None, access: AdminAccess) -> None:
        self.scheduler = scheduler
        self.access = access

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/queues", self.queues),
            web.get("/admin/scheduling/decisions", self.decisions),
        ]

    async def decisions(self, request: web.Request) -> web.Response:
        """The newest scheduling decisions first (``limit`` 1..1000, default 100; ``pool``):
        in a fleet every process's, from its shared log in Redis, whichever process answers
        (each entry's ``admission.process`` names who decided); alone, this process's. A
        team admin key sees its own team's."""
        actor = self.access.admin(request)
        raw = request.query.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise InvalidRequest("'limit' must be an integer from 1 to 1000.", param="limit")
        limit, alias = int(raw), request.query.get("pool")
        team = None if actor.is_master else actor.tenant
        scheduler = self.scheduler
        link = scheduler.link if scheduler is not None else None
        if isinstance(link, Fleet):
            try:
                found = await link.recent_decisions(limit, team, alias)
            except (ConnectionError, TimeoutError, OSError, RespError) as exc:
                raise ServiceUnavailable(
                    "The fleet's decision log (Redis) cannot be read now; try again shortly."
                ) from exc
            return json_reply({"fleet": True, "data": found})
        log = scheduler.decisions if scheduler is not None else None
        local = (
            [
                d.to_dict()
                for d in log.query(tenant=team, alias=alias, limit=10 * limit)
                if d.strategy == "scheduling"
            ][:limit]
            if log is not None
            else []
        )
        return json_reply({"fleet": False, "data": local})

    async def queues(self, request: web.Request) -> web.Response:
        actor = self.access.admin(request)
        scheduler = self.scheduler
        if scheduler is None:
            return json_reply({"enabled": False, "data": []})
        team = None if actor.is_master else actor.tenant
        only = request.query.get("pool")
        now = time.monotonic()
        pools = [
            pool_view(pool, team, now)
            for name, pool in sorted(scheduler.pools.items())
            if only is None or name == only
        ]
        return json_reply({"enabled": True, "data": pools})
