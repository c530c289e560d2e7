"""`CacheStage`: answer from a response cache before the upstream, file fresh answers after.

Runs after tenancy (the key may use the alias, within its limits) and after the safety input
checks, so a refused request never reaches a cache. On a hit it puts the cached chat
completion in ``req.answer``; the route replays it (as SSE chunks when the request streams,
through the same output filters and wire format as a fresh answer). The outcome names a
pseudo deployment (``cache:exact``, ``cache:semantic``) and the alias's cached price, so spend
bills the hit at that price (default zero) and metrics count it.

On a miss it asks for the response text (``capture_response``: taken after every output
filter, so what a client got is what is cached) and files it in ``after`` when the answer
finished normally (``stop`` or ``length``): an answer the output check blocked ends with
``content_filter`` and is never cached, nor is an error, a cut stream or a replayed hit.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetgate.cache.answer import CachedAnswer
from fleetgate.cache.config import CacheConfig
from fleetgate.cache.exact import ExactStore
from fleetgate.cache.keys import context_hash, deterministic, exact_key, last_user_text, reusable
from fleetgate.cache.semantic import SemanticIndex
from fleetgate.config.schema import Price
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.resources.embedder import Embedder
from fleetgate.telemetry.registry import Registry

__all__ = ["HEADER", "CacheStage"]

log = logging.getLogger("fleetgate.cache")

HEADER = "x-fleetgate-cache"
_STATE = "cache"
_FINISHED = ("stop", "length")


@dataclass(slots=True)
class _Pending:
    config: CacheConfig
    tenant: str
    exact_key: str | None = None
    context: str | None = None
    vector: npt.NDArray[np.float32] | None = None


class CacheStage:
    name = "cache"

    def __init__(
        self,
        aliases: dict[str, CacheConfig],
        exact: ExactStore,
        index: SemanticIndex,
        embedder: Embedder | None,
        registry: Registry,
    ) -> None:
        self.aliases = aliases
        self.exact = exact
        self.index = index
        self.embedder = embedder
        self._writes: set[asyncio.Task[None]] = set()
        self.requests = registry.counter(
            "fleetgate_cache_requests_total",
            "Requests to aliases with a response cache, by result "
            "(hit-exact, hit-semantic, miss, bypass: not cacheable).",
            ("alias", "result"),
        )
        self.stored = registry.counter(
            "fleetgate_cache_stored_total", "Answers filed in a response cache.", ("alias", "kind")
        )

    def _mark(self, req: GatewayRequest, result: str) -> None:
        req.response_headers[HEADER] = result
        self.requests.labels(req.alias, result).inc()

    async def before(self, req: GatewayRequest) -> None:
        config = self.aliases.get(req.alias)
        if config is None or req.endpoint is not Endpoint.CHAT:
            return
        body = req.body
        if not reusable(body):
            self._mark(req, "bypass")
            return
        pending = _Pending(config, req.principal.tenant)
        if config.exact and deterministic(body):
            key = exact_key(pending.tenant, req.alias, body)
            raw = await self.exact.get(key)
            answer = CachedAnswer.loads(raw) if raw is not None else None
            if answer is not None:
                self._hit(req, config, answer, "exact")
                return
            pending.exact_key = key
        if config.semantic is not None and await self._semantic(req, config, pending):
            return
        if pending.exact_key is None and pending.vector is None:
            self._mark(req, "bypass")
            return
        self._mark(req, "miss")
        req.capture_response = True
        req.state[_STATE] = pending

    async def _semantic(self, req: GatewayRequest, config: CacheConfig, pending: _Pending) -> bool:
        """Look the prompt up in the tenant's semantic index; True when it answered."""
        assert config.semantic is not None
        text = last_user_text(req.body)
        if text is None or self.embedder is None:
            return False
        try:
            vector = (await asyncio.to_thread(self.embedder.encode, [text]))[0]
        except Exception:
            log.exception("response cache: embedding failed; semantic cache skipped")
            return False
        context = context_hash(req.body)
        found = self.index.lookup(
            pending.tenant, req.alias, context, vector, config.semantic.threshold
        )
        if found is not None:
            self._hit(req, config, found[0], "semantic")
            return True
        pending.context, pending.vector = context, vector
        return False

    def _hit(
        self, req: GatewayRequest, config: CacheConfig, answer: CachedAnswer, kind: str
    ) -> None:
        self._mark(req, f"hit-{kind}")
        req.answer = answer.completion(req.request_id)
        out = req.outcome
        out.deployment = f"cache:{kind}"
        out.version = "cache"
        out.upstream_model = answer.model
        out.price = Price(
            input_per_mtok=config.price.input_per_mtok,
            output_per_mtok=config.price.output_per_mtok,
        )
        out.tags["cache"] = f"hit-{kind}"

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        pending = req.state.pop(_STATE, None)
        if not isinstance(pending, _Pending):
            return
        text = outcome.response_text
        if (
            outcome.status != 200
            or outcome.deployment is None
            or outcome.finish_reason not in _FINISHED
            or not text
            or len(text.encode()) > pending.config.max_answer_bytes
        ):
            return
        answer = CachedAnswer(
            content=text,
            finish_reason=str(outcome.finish_reason),
            model=outcome.upstream_model or req.alias,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
        )
        config = pending.config
        if pending.exact_key is not None:
            task = asyncio.get_running_loop().create_task(
                self.exact.put(pending.exact_key, answer.dumps(), config.ttl_s)
            )
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)
            self.stored.labels(req.alias, "exact").inc()
        if pending.vector is not None and pending.context is not None and config.semantic:
            self.index.add(
                pending.tenant, req.alias, pending.context, pending.vector, answer,
                ttl_s=config.semantic.ttl_s, max_entries=config.semantic.max_entries,
            )  # fmt: skip
            self.stored.labels(req.alias, "semantic").inc()

    async def drain(self) -> None:
        """Wait for the exact cache's writes still in flight (shutdown)."""
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=2.0)

    def describe(self) -> dict[str, Any]:
        return {"aliases": sorted(self.aliases)}
