"""Canary splits: version choice, stickiness, and the admin API in one process."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest
from fleetgate.routing.canary import CanarySplits, Split
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.routing.support import route_ctx


def versioned(v1: FakeUpstream, v2: FakeUpstream) -> dict[str, Any]:
    deps = [
        {
            "provider": "openai",
            "model": "m",
            "api_base": v1.url,
            "name": "chat-v1",
            "version": "v1",
        },
        {
            "provider": "openai",
            "model": "m",
            "api_base": v2.url,
            "name": "chat-v2",
            "version": "v2",
        },
    ]
    return {"models": [{"alias": "chat", "deployments": deps}], "tenancy": {"enabled": False},
            "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01}}  # fmt: skip


def test_split_must_add_up_to_100() -> None:
    with pytest.raises(InvalidRequest, match="add up to 100"):
        Split({"v1": 90, "v2": 20})
    with pytest.raises(InvalidRequest):
        Split({"v1": -10, "v2": 110})


async def test_weights_are_followed_and_sticky_callers_stay_put() -> None:
    splits = CanarySplits(rng=random.Random(7))
    await splits.set("chat", Split({"v1": 90, "v2": 10}))
    counts = Counter(splits.choose("chat", route_ctx()) for _ in range(4000))
    assert 300 < counts["v2"] < 500 and counts["v1"] + counts["v2"] == 4000

    await splits.set("chat", Split({"v1": 90, "v2": 10}, sticky=True))
    users = [route_ctx(headers={"x-user-id": f"user-{i}"}) for i in range(400)]
    first = [splits.choose("chat", u) for u in users]
    assert first == [splits.choose("chat", u) for u in users]  # same user, same version
    on_canary = {i for i, v in enumerate(first) if v == "v2"}
    assert 15 < len(on_canary) < 70
    # Ramping the canary up only moves users onto it.
    await splits.set("chat", Split({"v1": 50, "v2": 50}, sticky=True))
    later = [splits.choose("chat", u) for u in users]
    assert all(later[i] == "v2" for i in on_canary)
    assert sum(v == "v2" for v in later) > len(on_canary)
    # Without a header, the key's user decides.
    key = route_ctx(principal=Principal(key_id="k1", user_id="alice"))
    assert len({splits.choose("chat", key) for _ in range(20)}) == 1


async def test_admin_split_moves_traffic_and_rolls_back(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    client = await gateway(versioned(upstream, upstream_b))
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}

    async def deployments(n: int) -> set[str]:
        seen = set()
        for _ in range(n):
            resp = await client.post("/v1/chat/completions", headers=AUTH, json=body)
            assert resp.status == 200
            seen.add(resp.headers["x-fleetgate-deployment"])
        return seen

    resp = await client.put(
        "/admin/aliases/chat/split", headers=AUTH, json={"weights": {"v2": 100}}
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["split"]["weights"] == {"v2": 100}
    assert await deployments(10) == {"chat-v2"}

    resp = await client.put("/admin/aliases/chat/split", headers=AUTH,
                            json={"weights": {"v1": 100, "v2": 0}})  # fmt: skip
    assert resp.status == 200
    assert await deployments(10) == {"chat-v1"}
    got = await (await client.get("/admin/aliases/chat/split", headers=AUTH)).json()
    assert got["versions"] == ["v1", "v2"] and got["split"]["weights"] == {"v1": 100, "v2": 0}

    metrics = await (await client.get("/metrics")).text()
    assert 'version="v2"' in metrics and 'version="v1"' in metrics

    resp = await client.delete("/admin/aliases/chat/split", headers=AUTH)
    assert (await resp.json())["split"] is None


async def test_unhealthy_canary_falls_back_to_other_versions(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    client = await gateway(versioned(upstream, upstream_b))
    await client.put("/admin/aliases/chat/split", headers=AUTH, json={"weights": {"v2": 100}})
    from tests.fakes import Status

    upstream_b.queue(*[Status(500)] * 10)
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(6):
        resp = await client.post("/v1/chat/completions", headers=AUTH, json=body)
    assert resp.headers.get("x-fleetgate-deployment") == "chat-v1"


async def test_admin_split_validation(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    client = await gateway(versioned(upstream, upstream_b))
    resp = await client.put(
        "/admin/aliases/chat/split", headers=AUTH, json={"weights": {"v3": 100}}
    )
    assert resp.status == 400 and "v3" in (await resp.json())["error"]["message"]
    resp = await client.put(
        "/admin/aliases/nope/split", headers=AUTH, json={"weights": {"v1": 100}}
    )
    assert resp.status == 404
    resp = await client.put("/admin/aliases/chat/split", json={"weights": {"v1": 100}})
    assert resp.status == 401


@pytest.mark.parametrize(
    "extra", [{"revision": "x"}, {"revision": []}, {"updated_at": "soon"}, {"updated_at": {}}]
)
async def test_split_with_a_non_numeric_revision_or_time_is_400(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream,
    extra: dict[str, object],
) -> None:  # fmt: skip
    client = await gateway(versioned(upstream, upstream_b))
    body = {"weights": {"v1": 100}, **extra}
    resp = await client.put("/admin/aliases/chat/split", headers=AUTH, json=body)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["param"] == next(iter(extra))


async def test_a_replica_that_could_not_read_the_stored_splits_is_not_ready(
    tmp_path: Path,
) -> None:
    from fleetgate.http.access import AdminAccess
    from fleetgate.resources import Databases
    from fleetgate.resources.shared import SharedStates
    from fleetgate.routing.admin_routes import CanaryAdmin
    from fleetgate.routing.canary_feature import CanaryFeature

    def unused() -> Any:
        raise AssertionError("not called by this test")

    blocked = tmp_path / "fleetgate.db"
    blocked.mkdir()  # the database cannot be opened yet
    dbs = Databases(MIGRATIONS)
    shared = SharedStates(dbs, poll_interval_s=0.05)
    splits = CanarySplits(shared, dbs.get(f"sqlite:///{blocked}", tmp_path))
    feature = CanaryFeature(splits, CanaryAdmin(splits, unused, AdminAccess(unused), 1024))
    try:
        await feature.start()
        assert feature.missing() == ["database"]
        blocked.rmdir()
        for _ in range(150):
            if not feature.missing():
                break
            await asyncio.sleep(0.02)
        assert feature.missing() == [] and splits.loaded
    finally:
        await shared.aclose()
        await dbs.aclose()
