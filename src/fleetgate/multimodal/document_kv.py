"""KV prewarm and KV hit rates for team document sets (``retrieval.mode: document_set``).

In document-set mode every request of a team starts with the same prefix: the alias's system
prompt and the team's whole document set (`PromptAssembler.shared_prefix`). `DocumentKv`:

- **prewarms** it when the set changes through this process (an upload or a delete): for each
  alias in document-set mode with ``retrieval.prewarm_replicas`` > 0 and a ``kv-aware`` or
  ``pd-disagg`` strategy, the routing's `fleetgate.routing.prewarm.prewarm` sends the prefix to
  that many engines (chosen by the kv-aware cost; busy engines skipped; the lowest
  ``priority``; under the team's cache salt and index namespace), so the prefix index or the
  engines' KV events route the team's first retrieval request to an engine that holds it.
  Bounded: one prewarm at a time per process, changes that arrive meanwhile coalesced per team
  (its latest set is warmed once), at most ``MAX_PENDING`` teams waiting (more are counted as
  ``dropped``), and a prefix over ``retrieval.prewarm_max_tokens`` is not sent.
- **accounts** the KV hit rate of every request served with a document set, by tenant and
  document set, from the engine's own ``usage.prompt_tokens_details.cached_tokens`` (vLLM with
  ``--enable-prompt-tokens-details``; the simulator always): the counters
  ``fleetgate_document_kv_prompt_tokens_total`` / ``..._cached_tokens_total`` /
  ``..._requests_total`` ``{tenant, document_set}`` and `snapshot` (``GET /admin/documents/kv``),
  which also shows the first request after each change and each alias's last prewarm.

Example::

    kv = DocumentKv(runtime.config.prompts, runtime.assembler, registry,
                    routing=engine_routing, table=lambda: tables.table)
    runtime.index.listeners.append(kv.changed)
    ...
    kv.observe("team-a", doc_set, prompt_tokens=9000, cached_tokens=8960)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetgate.multimodal.prompt.assembler import PromptAssembler
from fleetgate.multimodal.prompt.config import PromptConfig
from fleetgate.multimodal.prompt.retrieval import DocumentSet
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.prewarm import prewarm
from fleetgate.routing.table import RouteTable
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["MAX_PENDING", "DocumentKv"]

MAX_PENDING = 64
_PREWARMED = ("kv-aware", "pd-disagg")

log = logging.getLogger("fleetgate.multimodal.document_kv")


@dataclass(slots=True)
class _SetStats:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    version: int = 0  # the newest version served
    first: dict[str, int] | None = None  # the first request of that version


@dataclass(slots=True)
class _Warm:
    state: str  # queued, running, warmed, skipped, failed
    version: int | None = None
    at: float = field(default_factory=time.time)
    reason: str | None = None
    engines: list[dict[str, Any]] = field(default_factory=list)


class DocumentKv:
    """Prewarm of changed document sets and their KV hit rates; see the module docstring."""

    def __init__(
        self,
        prompts: Mapping[str, PromptConfig],
        assembler: Callable[[str], PromptAssembler | None],
        registry: Registry | None = None,
        *,
        routing: EngineAwareRouting | None = None,
        table: Callable[[], RouteTable] | None = None,
    ) -> None:
        self._prompts = prompts
        self._assembler = assembler
        self._routing = routing
        self._table = table
        registry = registry or Registry()
        labels = ["tenant", "document_set"]
        self._requests = registry.counter(
            "fleetgate_document_kv_requests_total",
            "Requests served with a team's document set as their prompt prefix",
            labels,
        )
        self._prompt = registry.counter(
            "fleetgate_document_kv_prompt_tokens_total",
            "Prompt tokens of requests served with a document set (engine-reported)",
            labels,
        )
        self._cached = registry.counter(
            "fleetgate_document_kv_cached_tokens_total",
            "Of them, tokens the engine read from its prefix cache (its usage's cached_tokens)",
            labels,
        )
        self._prewarms = registry.counter(
            "fleetgate_document_prewarms_total",
            "Document-set prewarms per alias by result (warmed, skipped, failed, dropped)",
            ["result"],
        )
        self._stats: dict[tuple[str, str], _SetStats] = {}
        self._warm: dict[tuple[str, str], _Warm] = {}  # (team, alias)
        self._pending: dict[str, None] = {}  # teams to warm, oldest first
        self._worker: asyncio.Task[None] | None = None

    # -------------------------------------------------------------- prewarm

    def aliases(self) -> list[str]:
        """Aliases whose document sets are prewarmed."""
        return [
            alias
            for alias, cfg in self._prompts.items()
            if cfg.retrieval.mode == "document_set" and cfg.retrieval.prewarm_replicas > 0
        ]

    def changed(self, team: str) -> None:
        """A team's document set changed (an index listener): warm it in the background."""
        aliases = self.aliases()
        if self._routing is None or self._table is None or not aliases:
            return
        if team not in self._pending:
            if len(self._pending) >= MAX_PENDING:
                self._prewarms.labels("dropped").inc()
                return
            self._pending[team] = None
        for alias in aliases:
            self._warm[(team, alias)] = _Warm("queued")
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._drain(), name="fg-document-prewarm"
            )

    async def idle(self) -> None:
        """Wait until every queued prewarm has run (tests, benchmarks)."""
        while self._worker is not None and not self._worker.done():
            await asyncio.wait({self._worker})

    async def aclose(self) -> None:
        self._pending.clear()
        await cancel_and_wait(self._worker)

    async def _drain(self) -> None:
        while self._pending:
            team = next(iter(self._pending))
            del self._pending[team]  # a change from now on queues it again
            for alias in self.aliases():
                try:
                    status = await self._prewarm(team, alias)
                except Exception as exc:  # noqa: BLE001 - a prewarm never fails the gateway
                    log.warning("prewarm of %s's documents for %s failed: %r", team, alias, exc)
                    status = _Warm("failed", reason=type(exc).__name__)
                if team not in self._pending:  # else changed again: queued for another run
                    self._warm[(team, alias)] = status
                self._prewarms.labels(status.state).inc()

    async def _prewarm(self, team: str, alias: str) -> _Warm:
        assert self._routing is not None and self._table is not None
        self._warm[(team, alias)] = _Warm("running")
        try:
            route = self._table().route(alias)
        except Exception:  # noqa: BLE001 - the alias left the config
            return _Warm("skipped", reason="no such alias")
        if route.config.strategy not in _PREWARMED:
            return _Warm("skipped", reason=f"strategy {route.config.strategy} is not kv-aware")
        assembler = self._assembler(alias)
        prefix = await assembler.shared_prefix(team) if assembler is not None else None
        if prefix is None:
            return _Warm("skipped", reason="no documents")
        doc_set, messages = prefix
        retrieval = self._prompts[alias].retrieval
        tokens = estimate_prompt_tokens({"messages": messages})
        if tokens > retrieval.prewarm_max_tokens:
            return _Warm("skipped", doc_set.version, reason=f"prefix of {tokens} tokens")
        results = await prewarm(
            self._routing, route, messages, tenant=team, replicas=retrieval.prewarm_replicas
        )
        warmed = any(r.get("warmed") for r in results)
        reason = None if warmed else "; ".join(sorted({str(r.get("reason")) for r in results}))
        return _Warm(
            "warmed" if warmed else "skipped", doc_set.version, reason=reason, engines=results
        )

    # -------------------------------------------------------------- accounting

    def observe(
        self, tenant: str, doc_set: DocumentSet, *, prompt_tokens: int, cached_tokens: int
    ) -> None:
        """A request served with ``doc_set`` read ``cached_tokens`` of its ``prompt_tokens``
        from the engine's prefix cache."""
        if prompt_tokens <= 0:
            return
        cached = min(cached_tokens, prompt_tokens)
        stats = self._stats.setdefault((tenant, doc_set.team), _SetStats())
        stats.requests += 1
        stats.prompt_tokens += prompt_tokens
        stats.cached_tokens += cached
        if doc_set.version != stats.version or stats.first is None:
            stats.version = doc_set.version
            stats.first = {"prompt_tokens": prompt_tokens, "cached_tokens": cached}
        self._requests.labels(tenant, doc_set.team).inc()
        self._prompt.labels(tenant, doc_set.team).inc(prompt_tokens)
        self._cached.labels(tenant, doc_set.team).inc(cached)

    def snapshot(self, team: str | None = None) -> list[dict[str, Any]]:
        """Per tenant and document set (of ``team`` only, when given): hit rate, the first
        request of the newest version, and each alias's last prewarm of the set."""
        keys = set(self._stats) | {(t, t) for t, _ in self._warm}
        out = []
        for tenant, doc_team in sorted(keys):
            if team is not None and doc_team != team:
                continue
            stats = self._stats.get((tenant, doc_team), _SetStats())
            first = stats.first
            out.append({
                "tenant": tenant,
                "document_set": doc_team,
                "version": stats.version or None,
                "requests": stats.requests,
                "prompt_tokens": stats.prompt_tokens,
                "cached_tokens": stats.cached_tokens,
                "hit_rate": _ratio(stats.cached_tokens, stats.prompt_tokens),
                "first_request": None if first is None else {
                    **first, "hit_rate": _ratio(first["cached_tokens"], first["prompt_tokens"])},
                "prewarm": {
                    alias: {"state": w.state, "version": w.version, "at": round(w.at, 3),
                            "reason": w.reason, "engines": w.engines}
                    for (t, alias), w in sorted(self._warm.items()) if t == doc_team
                },
            })  # fmt: skip
        return out


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
