"""The overview: requests/s, time to first token and error rate by alias over the last hour
(from this process's metrics, sampled each minute), spend today and the active keys."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from fleetgate.console.core import ADMINS, Console, scoped_team
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.tenancy.reports import spend_report

__all__ = ["MetricWindow", "OverviewPage"]


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float
    requests: dict[str, tuple[float, float]]  # alias -> (all, errors)
    ttft: dict[str, tuple[float, float]]  # alias -> (sum seconds, count)


def _sample(metrics: GatewayMetrics, at: float) -> _Sample:
    requests: dict[str, list[float]] = {}
    for labels, value in metrics.requests.snapshot():
        alias, status = labels[0], labels[-1]
        pair = requests.setdefault(alias, [0.0, 0.0])
        pair[0] += float(value)  # type: ignore[arg-type]
        if not status.isdigit() or int(status) >= 400:
            pair[1] += float(value)  # type: ignore[arg-type]
    ttft: dict[str, list[float]] = {}
    for labels, data in metrics.ttft.snapshot():
        assert isinstance(data, list)  # a histogram child: [counts, sum, count]
        pair = ttft.setdefault(labels[0], [0.0, 0.0])
        pair[0] += float(data[1])
        pair[1] += float(data[2])
    return _Sample(
        at,
        {a: (v[0], v[1]) for a, v in requests.items()},
        {a: (v[0], v[1]) for a, v in ttft.items()},
    )


@dataclass
class MetricWindow:
    """Samples of the request counters, one a minute for an hour: rates are the difference
    between now and the oldest sample kept."""

    metrics: GatewayMetrics
    window_s: float = 3600.0
    every_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _samples: deque[_Sample] = field(default_factory=deque)

    def tick(self) -> None:
        now = self.clock()
        self._samples.append(_sample(self.metrics, now))
        while self._samples and now - self._samples[0].at > self.window_s:
            self._samples.popleft()

    async def run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self.every_s)

    def by_alias(self) -> list[dict[str, Any]]:
        now = _sample(self.metrics, self.clock())
        base = self._samples[0] if self._samples else _Sample(now.at, {}, {})
        span = max(now.at - base.at, 1.0)
        out = []
        for alias in sorted(set(now.requests) | set(now.ttft)):
            total, errors = now.requests.get(alias, (0.0, 0.0))
            total0, errors0 = base.requests.get(alias, (0.0, 0.0))
            t_sum, t_count = now.ttft.get(alias, (0.0, 0.0))
            t_sum0, t_count0 = base.ttft.get(alias, (0.0, 0.0))
            n, bad, firsts = total - total0, errors - errors0, t_count - t_count0
            out.append({
                "alias": alias, "requests": int(n), "rps": n / span,
                "error_rate": bad / n if n else 0.0,
                "ttft_ms": (t_sum - t_sum0) / firsts * 1000 if firsts else None,
            })  # fmt: skip
        return out

    def span_s(self) -> float:
        return (self.clock() - self._samples[0].at) if self._samples else 0.0


class OverviewPage:
    def __init__(self, console: Console, window: MetricWindow) -> None:
        self.console = console
        self.window = window

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/ui/overview", self.page)]

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        actor = session.principal
        tenancy = self.console.tenancy
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        today = await spend_report(
            tenancy.db, actor, ["alias"], int(midnight.timestamp() * 1000), None
        )
        team = scoped_team(actor)
        active = [
            e for e in tenancy.cache.snapshot.by_id.values()
            if (team is None or e.principal.team_id == team) and not e.id.startswith("jwt:")
        ]  # fmt: skip
        # Request metrics are per alias, not per team: a team admin sees its team's spend
        # below, not other teams' traffic on shared aliases.
        aliases = self.window.by_alias() if actor.is_master else None
        return self.console.page(
            request, session, "overview.html", aliases=aliases,
            span_min=self.window.span_s() / 60, spend_today=sum(r["spend_usd"] for r in today),
            requests_today=sum(r["requests"] for r in today), today=today,
            active_keys=len(active),
        )  # fmt: skip
