"""The semantic router stage in the gateway, with a small deterministic encoder (no model)."""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetgate.app import SECTIONS
from fleetgate.config.loader import parse_config
from fleetgate.errors import ConfigError
from fleetgate.resources.embedder import Vectors
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.routing.semantic_stage import SemanticStage, request_text
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream


class HashingEncoder:
    """Bag of words and character bigrams hashed into 512 dims; counts its calls."""

    name, dim = "hashing-512", 512

    def __init__(self) -> None:
        self.batches: list[int] = []

    def load(self) -> None:
        return None

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.batches.append(len(texts))
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, text in enumerate(texts):
            low = text.lower()
            tokens = re.findall(r"[a-z0-9]+", low) + [low[j : j + 2] for j in range(len(low) - 1)]
            for tok in tokens:
                out[i, zlib.crc32(tok.encode()) % 512] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


SEMANTIC: dict[str, Any] = {
    "alias": "auto",
    "default_intent": "chitchat",
    "intents": {
        "code": {"alias": "smart", "reasoning": True},
        "math": {"alias": "smart", "reasoning": True},
        "retrieval": {"alias": "fast", "retrieval": True},
        "reasoning": {"alias": "smart", "reasoning": True},
        "chitchat": {"alias": "fast"},
    },
    "reasoning_styles": {
        "smart": {"enable": {"chat_template_kwargs": {"enable_thinking": True}},
                  "disable": {"chat_template_kwargs": {"enable_thinking": False}}},
        "fast": {"enable": {"reasoning_effort": "high"}, "disable": {"reasoning_effort": "low"}},
    },
}  # fmt: skip


def _config(fast: FakeUpstream, smart: FakeUpstream) -> dict[str, Any]:
    def alias(name: str, up: FakeUpstream) -> dict[str, Any]:
        dep = {"provider": "openai", "model": f"{name}-model", "api_base": up.url, "name": name}
        return {"alias": name, "deployments": [dep]}

    return {
        "models": [alias("fast", fast), alias("smart", smart)],
        "tenancy": {"enabled": False},
        "semantic": SEMANTIC,
    }


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}


async def _stage(tmp_path: Path, encoder: HashingEncoder) -> SemanticStage:
    stage = SemanticStage(SemanticConfig.model_validate(SEMANTIC), tmp_path, encoder=encoder)
    return stage


async def test_routes_by_intent_and_says_so(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    stage = await _stage(tmp_path, HashingEncoder())
    client = await gateway(_config(upstream, upstream_b), stages=[stage])
    assert await stage.wait_ready(30)

    # A rule: a Python traceback is code -> smart, reasoning on.
    traceback = "Traceback (most recent call last): KeyError 'x'"
    resp = await client.post("/v1/chat/completions", headers=AUTH, json=_chat(traceback))
    assert resp.status == 200, await resp.text()
    route = resp.headers["x-fleetgate-route"]
    assert route.startswith("intent=code; alias=smart; reasoning=on; retrieval=no; score=1.00")
    assert "source=rule" in route
    assert resp.headers["x-fleetgate-deployment"] == "smart"
    sent = upstream_b.seen[-1].body
    assert sent["model"] == "smart-model"
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}

    # The classifier: an example sentence of the shipped set, no rule fires.
    resp = await client.post("/v1/chat/completions", headers=AUTH,
                             json=_chat("do you like music?"))  # fmt: skip
    route = resp.headers["x-fleetgate-route"]
    assert "intent=chitchat; alias=fast; reasoning=off" in route and "source=embedding" in route
    assert upstream.seen[-1].body["reasoning_effort"] == "low"


async def test_retrieval_flag_and_client_settings_win(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    stage = await _stage(tmp_path, HashingEncoder())
    client = await gateway(_config(upstream, upstream_b), stages=[stage])
    body = _chat("what's the weather forecast for Paris?", reasoning_effort="medium")
    resp = await client.post("/v1/chat/completions", headers=AUTH, json=body)
    assert resp.status == 200
    assert (
        "intent=retrieval; alias=fast; reasoning=off; retrieval=yes"
        in resp.headers["x-fleetgate-route"]
    )
    assert upstream.seen[-1].body["reasoning_effort"] == "medium"  # the client's, not "low"


async def test_router_alias_refuses_embeddings(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    client = await gateway(_config(upstream, upstream_b),
                           stages=[await _stage(tmp_path, HashingEncoder())])  # fmt: skip
    resp = await client.post("/v1/embeddings", headers=AUTH, json={"model": "auto", "input": "x"})
    assert resp.status == 400
    assert "chat and text completions" in (await resp.json())["error"]["message"]


async def test_concurrent_requests_share_batches_and_examples_are_cached(tmp_path: Path) -> None:
    first = HashingEncoder()
    stage = await _stage(tmp_path, first)
    await stage.start()
    assert await stage.wait_ready(30)
    assert sum(first.batches) == len(stage.router.examples)  # embedded once, then cached
    before = len(first.batches)
    texts = [f"tell me about your weekend number {i}" for i in range(12)]
    decisions = await asyncio.gather(*(stage.classify(t) for t in texts))
    assert all(d.source == "embedding" for d in decisions)
    assert len(first.batches) - before < len(texts)  # fewer encoder calls than requests
    await stage.aclose()

    second = HashingEncoder()
    again = await _stage(tmp_path, second)
    await again.start()
    assert await again.wait_ready(30)
    assert second.batches == []  # example embeddings came from the disk cache
    await again.aclose()


async def test_model_failure_falls_back_to_rules_then_default(tmp_path: Path) -> None:
    class Broken(HashingEncoder):
        def load(self) -> None:
            raise OSError("weights missing")

    stage = await _stage(tmp_path, Broken())
    await stage.start()
    assert not await stage.wait_ready(30)
    assert (await stage.classify("solve for x: 2x + 1 = 5")).intent == "math"
    fallback = await stage.classify("something entirely unremarkable")
    assert (fallback.intent, fallback.source) == ("chitchat", "default")
    await stage.aclose()


def test_request_text_is_the_last_user_message() -> None:
    body = {"messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "second"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
    ]}  # fmt: skip
    assert request_text(body, 100) == "second"
    assert request_text({"prompt": "abcdef"}, 3) == "abc"


def test_config_refuses_unknown_target_alias(upstream: FakeUpstream) -> None:
    cfg = _config(upstream, upstream)
    cfg["semantic"] = {**SEMANTIC, "default_intent": None, "intents": {"code": {"alias": "nope"}}}
    with pytest.raises(ConfigError, match="not a configured alias"):
        parse_config(cfg, sections=SECTIONS)  # the feature list's declarations
