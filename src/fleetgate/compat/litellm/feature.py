"""`LiteLLMFeature`: clients configured for a LiteLLM proxy work against fleetgate as they are.

- ``base_url`` with or without ``/v1``, and Azure OpenAI SDKs' deployment paths (`forward`);
- keys in ``x-litellm-api-key`` (before ``Authorization``, as LiteLLM reads it) and in Azure's
  ``api-key`` (when there is no ``Authorization``): read by the authenticator chain itself
  (`fleetgate.core.AuthChain.read_key_headers`), so every route sees them, once;
- ``/key/info``, ``/team/info``, ``/spend/logs`` in LiteLLM's shapes under fleetgate's roles
  (`management`); ``/health/liveliness``, ``/health/readiness``.

Migrating a LiteLLM proxy's config and database: ``fleetgate import litellm-config``
and ``litellm-db`` (`fleetgate.importers`).
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from fleetgate.compat.litellm.forward import routes as forward_routes
from fleetgate.compat.litellm.management import Management
from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.tenancy.ports import TENANCY

__all__ = ["KEY_HEADERS_AFTER", "KEY_HEADERS_BEFORE", "LiteLLMFeature"]

KEY_HEADERS_BEFORE = ("x-litellm-api-key",)
KEY_HEADERS_AFTER = ("api-key",)


class LiteLLMFeature(BaseFeature):
    name = "litellm"

    def __init__(self, management: Management) -> None:
        self.management = management

    @classmethod
    def build(cls, core: Core) -> LiteLLMFeature:
        core.auth.read_key_headers(before=KEY_HEADERS_BEFORE, after=KEY_HEADERS_AFTER)
        return cls(Management(core.ports.get(TENANCY), core.access))

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [*forward_routes(), *self.management.routes()]
