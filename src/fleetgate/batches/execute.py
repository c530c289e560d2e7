"""`GatewaySender`: how the batch lane sends a line through this gateway's own request path.

Each line runs as the key that created the batch (looked up in tenancy's key cache at send
time, so a key revoked since fails its remaining lines with 401), narrowed to what the caller
that created it was allowed (`fleetgate.batches.grant.Grant`: a JWT's aliases, user and
expiry; an expired one is 401 ``expired_api_key``), in the ``batch`` band
(``x-fleetgate-priority: batch``: a team whose band is lower keeps its own), through every
stage: the key's model allow-list, rate limits and budget, guardrails, admission, billing.
The request id is the line's own (``<batch id>-<line>``): a line replayed after a crash is
billed once, because spend records are idempotent on it.
"""

from __future__ import annotations

import time
from typing import Any

from fleetgate.api.path import RequestPath
from fleetgate.batches.grant import Grant
from fleetgate.batches.worker import LineRequest
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint
from fleetgate.errors import AuthenticationFailed
from fleetgate.providers.base import RoutedEndpoint
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["ENDPOINTS", "GatewaySender"]

ENDPOINTS: dict[str, RoutedEndpoint] = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
}
_HEADERS = {"x-fleetgate-priority": "batch"}
_MASTER = Principal(key_id="master", role="master")


class GatewaySender:
    """Sends batch lines through the gateway's request path (`REQUEST_PATH`); asks the
    scheduler (None: scheduling off) for idle capacity and tenancy's key cache (None: tenancy
    off) for each line's key."""

    def __init__(
        self, path: RequestPath, scheduler: Scheduler | None, tenancy: Tenancy | None
    ) -> None:
        self._path = path
        self._scheduler = scheduler
        self._tenancy = tenancy

    def idle(self, alias: str) -> bool:
        scheduler = self._scheduler
        return scheduler is None or scheduler.idle(alias, "batch")

    def _principal(self, key_id: str, grant: Grant | None) -> Principal:
        principal = self._entry(key_id)
        if grant is None:  # a batch created before grants were stored
            return principal
        if grant.expired(int(time.time() * 1000)):
            raise AuthenticationFailed(
                "The token that created this batch has expired.", code="expired_api_key"
            )
        return grant.narrow(principal)

    def _entry(self, key_id: str) -> Principal:
        if key_id == _MASTER.key_id:
            return _MASTER
        tenancy = self._tenancy
        entry = tenancy.cache.entry(key_id) if tenancy is not None else None
        if entry is None:
            raise AuthenticationFailed("The key that created this batch no longer exists.")
        if entry.expires_ms is not None and time.time() * 1000 >= entry.expires_ms:
            raise AuthenticationFailed(
                "The key that created this batch has expired.", code="expired_api_key"
            )
        return entry.principal

    async def send(self, line: LineRequest) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one line; refusals and failures as OpenAI error bodies."""
        try:
            principal = self._principal(line.key_id, line.grant)
        except AuthenticationFailed as exc:
            return exc.status, exc.to_dict()
        return await self._path.answer(
            ENDPOINTS[line.endpoint], principal, line.body, request_id=line.request_id,
            headers=dict(_HEADERS), batch=True,
        )  # fmt: skip
