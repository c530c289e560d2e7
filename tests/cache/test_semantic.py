"""The semantic response cache with the real MiniLM (loaded once for the module, through the
process's one loader): paraphrases hit within a tenant, never across tenants, and never for
a follow-up whose earlier turns differ."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fleetgate.cache.answer import CachedAnswer
from fleetgate.cache.semantic import SemanticIndex
from fleetgate.resources.minilm import MiniLM
from tests.cache.support import ask, ask_stream, cache_config, cache_gateway, chat, team_key
from tests.fakes import FakeUpstream, Reply

SEMANTIC = {"semantic": {"threshold": 0.9, "ttl_s": 60}}


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLM]:
    loader = MiniLM()
    loader.model()  # load once, up front (seconds)
    yield loader


async def test_paraphrase_hits_within_a_tenant_never_across(
    tmp_path: Path, upstream: FakeUpstream, minilm: MiniLM
) -> None:
    upstream.queue(Reply("Paris (for team A)."), Reply("Paris (for team B)."))
    async with cache_gateway(cache_config(upstream, SEMANTIC), tmp_path, minilm=minilm) as client:
        key_a, key_b = await team_key(client, "a"), await team_key(client, "b")
        first = chat("What is the capital of France?", temperature=0.7)
        assert (await ask(client, key_a, first))[1] == "miss"
        paraphrase = chat("What is the capital city of France?", temperature=0.7)
        status, header, data = await ask(client, key_a, paraphrase)
        assert (status, header) == (200, "hit-semantic")
        assert data["choices"][0]["message"]["content"] == "Paris (for team A)."
        # team B asks the very same paraphrase: its own upstream answer, not A's
        status, header, data = await ask(client, key_b, paraphrase)
        assert (status, header) == (200, "miss")
        assert data["choices"][0]["message"]["content"] == "Paris (for team B)."
        header, chunks, done = await ask_stream(client, key_b, first)
        assert header == "hit-semantic" and done
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == "Paris (for team B)."
        # an unrelated question is no hit
        assert (await ask(client, key_a, chat("How do I bake sourdough bread?")))[1] == "miss"
        assert len(upstream.seen) == 3
        assert minilm.loads == 1  # the one shared loader, never another


async def test_follow_up_with_a_different_history_is_no_hit(
    tmp_path: Path, upstream: FakeUpstream, minilm: MiniLM
) -> None:
    async with cache_gateway(cache_config(upstream, SEMANTIC), tmp_path, minilm=minilm) as client:
        key = await team_key(client, "a")

        def turns(topic: str, question: str) -> dict[str, object]:
            return {
                "model": "tiny",
                "messages": [
                    {"role": "user", "content": f"Tell me about {topic}."},
                    {"role": "assistant", "content": f"{topic} is a big subject."},
                    {"role": "user", "content": question},
                ],
            }

        assert (await ask(client, key, turns("Rome", "How old is it?")))[1] == "miss"
        assert (await ask(client, key, turns("Rome", "how old is it")))[1] == ("hit-semantic")
        assert (await ask(client, key, turns("Tokyo", "How old is it?")))[1] == "miss"


def test_index_threshold_ttl_and_bound() -> None:
    now = [0.0]
    index = SemanticIndex(clock=lambda: now[0])
    answer = CachedAnswer("a", "stop", "m", 1, 1)
    v = np.array([1.0, 0.0], dtype=np.float32)
    close = np.array([0.95, np.sqrt(1 - 0.95**2)], dtype=np.float32)
    index.add("t", "x", "ctx", v, answer, ttl_s=10, max_entries=2)
    assert index.lookup("t", "x", "ctx", close, threshold=0.9) == (answer, pytest.approx(0.95))
    assert index.lookup("t", "x", "ctx", close, threshold=0.96) is None
    assert index.lookup("t", "x", "other", v, threshold=0.9) is None
    assert index.lookup("u", "x", "ctx", v, threshold=0.9) is None
    for _ in range(3):
        index.add("t", "x", "ctx", v, answer, ttl_s=10, max_entries=2)
    assert index.size("t", "x") == 2
    now[0] = 11.0
    assert index.lookup("t", "x", "ctx", v, threshold=0.9) is None
