"""The semantic router as a request stage: ``model: auto`` → an alias chosen by intent.

For a request to the router alias the stage classifies the last user message (keyword rules
first, then sentence embeddings), rewrites ``req.alias``, turns reasoning on or off through
the target alias's configured body fields, says whether retrieval is wanted, returns the
decision in the ``x-fleetgate-route`` header, keeps it in ``req.state["semantic"]`` for later
stages (a retrieval stage reads ``.retrieval``), and logs it as one JSON line.

The model loads in a worker thread after startup; until it is ready a request waits up to
``load_wait_s`` and then routes by rules, else to the default intent.

Example::

    stage = SemanticStage(SEMANTIC_SECTION.of(config), settings.data_dir)
    feature = SemanticFeature(stage)   # fleetgate.routing.semantic_feature: starts and stops it
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.messages_text import content_text
from fleetgate.resources.embedder import Embedder
from fleetgate.resources.minilm import MiniLM
from fleetgate.routing.semantic import (
    IntentRouter,
    LabelledText,
    RouteDecision,
    cached_embeddings,
    load_examples,
)
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.routing.semantic_encoder import BatchingEncoder, MiniLMEncoder
from fleetgate.tasks import cancel_and_wait

__all__ = ["ROUTE_HEADER", "SemanticStage", "request_text"]

ROUTE_HEADER = "x-fleetgate-route"
log = logging.getLogger("fleetgate.routing.semantic")


def request_text(body: Mapping[str, Any], max_chars: int) -> str:
    """The text to classify: the last user message (chat) or the prompt (completions)."""
    messages = body.get("messages")
    text = ""
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                text = content_text(message.get("content"), sep=" ")
                break
    else:
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else ""
    return text.strip()[:max_chars]


def _merge_missing(body: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Add ``fields`` to ``body`` without overriding what the client set (one level deep)."""
    for key, value in fields.items():
        mine = body.get(key)
        if key not in body:
            body[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            body[key] = {**value, **mine}


class SemanticStage:
    """Routes the router alias's requests by intent (see the module docstring)."""

    name = "semantic"

    def __init__(
        self,
        config: SemanticConfig,
        data_dir: Path,
        *,
        encoder: Embedder | None = None,
        extra_examples: Sequence[LabelledText] = (),
        minilm: MiniLM | None = None,
    ) -> None:
        """``encoder``: a test's own encoder; else MiniLM from ``minilm``, the process's shared
        loader (without one, a loader of its own)."""
        self.config = config
        extra = list(extra_examples)
        if config.examples_path:
            extra += load_examples(Path(config.examples_path).read_text("utf-8").splitlines())
        self.router = IntentRouter.from_config(config, extra)
        raw = encoder or MiniLMEncoder(
            minilm, quantize=config.quantize, threads=config.threads, max_tokens=config.max_tokens
        )
        self.encoder = BatchingEncoder(raw, max_batch=config.batch_max)
        self._cache_dir = data_dir / "semantic"
        self._ready = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alias(self) -> str:
        return self.config.alias

    @property
    def ready(self) -> bool:
        """The classifier is trained (rules work before that)."""
        return self._ready.is_set() and self._error is None

    async def start(self) -> None:
        """Begin loading the model and embedding the examples in the worker thread."""
        if self._task is None:
            self._task = asyncio.create_task(self._load())

    async def wait_ready(self, timeout: float | None = None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self.ready

    async def _load(self) -> None:
        started = time.perf_counter()
        try:
            await self.encoder.start()
            if self.encoder.load_error is not None:
                raise self.encoder.load_error
            raw = self.encoder.encoder
            texts = [e.text for e in self.router.examples]
            vectors = await self.encoder.run(
                cached_embeddings, raw.name, texts, raw.encode, self._cache_dir
            )
            await self.encoder.run(self.router.fit, vectors)
            log.info("semantic router ready in %.1fs (%d examples, %s)",
                     time.perf_counter() - started, len(texts), raw.name)  # fmt: skip
        except Exception as exc:
            self._error = exc
            log.error("semantic router could not load its model, routing by rules: %s", exc)
        finally:
            self._ready.set()

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.encoder.aclose()

    async def classify(self, text: str) -> RouteDecision:
        """Rules, then the classifier (in the worker thread), else the default intent."""
        by_rule = self.router.by_rule(text)
        if by_rule is not None:
            return by_rule
        if not text or not await self.wait_ready(self.config.load_wait_s):
            return self.router.default()
        vector = await self.encoder.encode(text)
        return self.router.by_vector(vector)

    async def before(self, req: GatewayRequest) -> None:
        if req.alias != self.config.alias:
            return
        if req.endpoint not in (Endpoint.CHAT, Endpoint.COMPLETIONS):
            raise InvalidRequest(
                f"The router alias '{self.config.alias}' serves chat and text completions only.",
                param="model",
            )
        started = time.perf_counter()
        decision = await self.classify(request_text(req.body, self.config.max_chars))
        if not req.principal.may_use(decision.alias):
            # The rewrite must not widen the key: fall back to the default intent if the key may
            # use that, else refuse (the allow-list, limits and policy all see the real alias).
            decision = self.router.default()
            if not req.principal.may_use(decision.alias):
                raise PermissionDenied(
                    f"'{self.config.alias}' routed this request to a model this key may not use.",
                    param="model",
                )
        req.alias = decision.alias
        style = self.config.reasoning_styles.get(decision.alias)
        if style is not None:
            _merge_missing(req.body, style.enable if decision.reasoning else style.disable)
        req.response_headers[ROUTE_HEADER] = decision.header()
        req.state["semantic"] = decision
        log.info(
            "%s",
            orjson.dumps({
                "event": "semantic_route", "request_id": req.request_id,
                "router_alias": self.config.alias, "intent": decision.intent,
                "alias": decision.alias, "reasoning": decision.reasoning,
                "retrieval": decision.retrieval, "score": round(decision.score, 4),
                "source": decision.source,
                "ms": round((time.perf_counter() - started) * 1000, 3),
            }).decode(),
        )  # fmt: skip

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        return None
