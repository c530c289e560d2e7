"""`RolloutAlerts`: a rollout decision that changed something is audited and, when
``releases.rollout.alert_webhook`` is set, POSTed there as JSON::

    {"event": "rollout.rolled_back", "alias": "chat", "candidate": "v8", "baseline": "v7",
     "status": "rolled_back", "percent": 0.0, "step": 0, "reason": "error rate 10.2% > ..."}
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp

from fleetgate.contract.principal import Principal
from fleetgate.http import AdminAccess
from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.rollouts import Rollout
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["RolloutAlerts"]

log = logging.getLogger("fleetgate.releases.rollout")


class RolloutAlerts:
    def __init__(
        self, access: AdminAccess, http: OutboundHttp, config: Callable[[], RolloutConfig]
    ) -> None:
        self.access = access
        self.http = http
        self.config = config
        self.sent: list[dict[str, object]] = []  # what was sent (for operators and tests)

    async def __call__(self, event: str, rollout: Rollout) -> None:
        payload: dict[str, object] = {
            "event": event, "alias": rollout.alias, "candidate": rollout.candidate,
            "baseline": rollout.baseline, "status": rollout.status,
            "percent": rollout.percent, "step": rollout.step, "reason": rollout.reason,
        }  # fmt: skip
        try:
            await self.access.record(Principal(key_id="rollout"), event, rollout.alias, payload)
        except Exception as exc:  # the audit log may be away; the decision stands
            log.warning("could not audit %s: %s", event, exc)
        self.sent.append(payload)
        url = self.config().alert_webhook
        if url:
            try:
                async with self.http.session().post(
                    url, json=payload, timeout=aiohttp.ClientTimeout(total=5)
                ) as resp:
                    if resp.status >= 400:
                        log.warning("rollout webhook answered %d", resp.status)
            except (TimeoutError, aiohttp.ClientError) as exc:
                log.warning("rollout webhook failed: %s", exc)
