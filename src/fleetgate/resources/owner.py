"""`Resources`: the one owner of everything a gateway process shares between its features.

Created once per app (`fleetgate.app.build_state`), handed to the components that need a
connection, a database, the outbound HTTP session or the embedding model, and closed once by
`aclose` after every component has stopped. Components never open these themselves, and never
close what they were handed.

=================  =====================================================================
``redis``          per URL one lean command connection and one redis-py pool
``databases``      per URL one `fleetgate.store.Database` (engine + pool), migrated once
``http``           one aiohttp session for side services (guards, ASR/TTS, webhooks, ...)
``minilm``         all-MiniLM-L6-v2, loaded at most once (router, retrieval, classifier)
``shared``         the state replicas must agree on, followed by one poller per process
=================  =====================================================================

Example::

    resources = Resources(migrations=MIGRATIONS)
    tenancy = Tenancy(settings, config.tenancy, registry, resources=resources)
    ...
    await tenancy.aclose()
    await resources.aclose()
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from fleetgate.resources.databases import Databases
from fleetgate.resources.minilm import MiniLM
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.resources.redis import RedisConnections
from fleetgate.resources.shared import SharedStates

__all__ = ["Resources"]

log = logging.getLogger("fleetgate.resources")


class Resources:
    """Shared connections, databases, HTTP session and model of one gateway process."""

    def __init__(
        self,
        *,
        redis: RedisConnections | None = None,
        databases: Databases | None = None,
        http: OutboundHttp | None = None,
        minilm: MiniLM | None = None,
        migrations: Sequence[Path] = (),
    ) -> None:
        """``migrations``: the features' revision folders the databases are migrated with
        (`fleetgate.app.MIGRATIONS`), unless ``databases`` is given."""
        self.redis = redis or RedisConnections()
        self.databases = databases or Databases(migrations)
        self.http = http or OutboundHttp()
        self.minilm = minilm or MiniLM()
        self.shared = SharedStates(self.databases)

    async def aclose(self) -> None:
        """Close everything (idempotent); one failing close never skips the others."""
        for name, close in (
            ("shared", self.shared.aclose),
            ("http", self.http.aclose),
            ("redis", self.redis.aclose),
            ("databases", self.databases.aclose),
        ):
            try:
                await close()
            except Exception:
                log.exception("closing the shared %s failed", name)
