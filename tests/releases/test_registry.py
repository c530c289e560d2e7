"""The registry on SQLite and PostgreSQL: immutable versions, stage moves by compare-and-set,
concurrent promotions, rollback, retention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.errors import Conflict, InvalidRequest, NotFound
from fleetgate.releases.records import ModelSpec, VersionSpec
from fleetgate.releases.registry import Registry
from fleetgate.store.database import Database


@pytest.fixture
async def registry(db_url: str, tmp_path: Path) -> AsyncIterator[Registry]:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    try:
        yield Registry(db, retention=3)
    finally:
        await db.aclose()


def spec(n: int, **extra: object) -> VersionSpec:
    return VersionSpec.model_validate(
        {
            "artifact_uri": f"s3://models/chat/{n}",
            "tokenizer": "meta-llama/Llama-3.1-8B",
            "tensor_parallel": 2,
            "max_model_len": 8192,
            "quantization": None,
            "deployments": [
                {"model": "tiny", "api_base": f"http://127.0.0.1:{9000 + n}/v1", "name": f"d{n}"}
            ],
            **extra,
        }
    )


async def registered(registry: Registry, count: int) -> list[str]:
    await registry.create_model(ModelSpec(name="chat"))
    return [(await registry.register("chat", spec(i)))["version"] for i in range(1, count + 1)]


async def test_versions_are_numbered_and_described(registry: Registry) -> None:
    assert await registered(registry, 2) == ["v1", "v2"]
    named = await registry.register("chat", spec(3, version="int4", parent_version="v2",
                                                 quantization="awq"))  # fmt: skip
    assert named["seq"] == 3 and named["parent_version"] == "v2"
    v = await registry.version("chat", "int4")
    assert v["quantization"] == "awq" and v["tensor_parallel"] == 2
    assert v["deployments"][0]["api_base"] == "http://127.0.0.1:9003/v1"
    model = await registry.model("chat")
    assert [x["version"] for x in model["versions"]] == ["int4", "v2", "v1"]
    assert model["stages"] == {"previous": None, "production": None, "staging": None}
    with pytest.raises(Conflict):
        await registry.register("chat", spec(4, version="v1"))
    with pytest.raises(InvalidRequest):
        await registry.register("chat", spec(4, parent_version="nope"))
    with pytest.raises(NotFound):
        await registry.register("other", spec(1))
    with pytest.raises(Conflict):
        await registry.create_model(ModelSpec(name="chat"))


async def test_promotion_moves_production_to_previous(registry: Registry) -> None:
    await registered(registry, 2)
    assert [m.to_version for m in await registry.promote("chat", "production", "v1",
                                                         actor="k")] == ["v1"]  # fmt: skip
    moves = await registry.promote("chat", "production", "v2", actor="k")
    assert [(m.stage, m.from_version, m.to_version) for m in moves] == [
        ("production", "v1", "v2"),
        ("previous", None, "v1"),
    ]
    stages = await registry.stages("chat")
    assert stages["production"] == "v2" and stages["previous"] == "v1"
    await registry.promote("chat", "canary-eu", "v1", actor="k")  # a custom stage
    assert (await registry.stages("chat"))["canary-eu"] == "v1"
    # rollback: v1 serves again, v2 is previous; one history entry per operation
    await registry.rollback("chat", actor="k")
    stages = await registry.stages("chat")
    assert (stages["production"], stages["previous"]) == ("v1", "v2")
    history = await registry.history("chat")
    assert [(h.action, h.stage, h.from_version, h.to_version) for h in history] == [
        ("rollback", "production", "v2", "v1"),
        ("promote", "canary-eu", None, "v1"),
        ("promote", "production", "v1", "v2"),
        ("promote", "production", None, "v1"),
    ]


async def test_strict_compare_and_set_refuses_a_moved_stage(registry: Registry) -> None:
    await registered(registry, 3)
    await registry.promote("chat", "production", "v1", actor="k", expected=None)
    with pytest.raises(Conflict) as err:
        await registry.promote("chat", "production", "v2", actor="k", expected=None)
    assert err.value.status == 409
    await registry.promote("chat", "production", "v2", actor="k", expected="v1")
    assert (await registry.stages("chat"))["production"] == "v2"
    # expecting the target itself is a no-op only when the stage really holds it
    await registry.promote("chat", "production", "v2", actor="k", expected="v2")
    with pytest.raises(Conflict):
        await registry.promote("chat", "production", "v3", actor="k", expected="v3")
    assert (await registry.stages("chat"))["production"] == "v2"


async def test_two_concurrent_strict_promotions_one_wins(registry: Registry) -> None:
    await registered(registry, 3)
    results = await asyncio.gather(
        registry.promote("chat", "production", "v2", actor="a", expected=None),
        registry.promote("chat", "production", "v3", actor="b", expected=None),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, list)]
    lost = [r for r in results if isinstance(r, Conflict)]
    assert len(won) == 1 and len(lost) == 1, results
    stages = await registry.stages("chat")
    assert stages["production"] == won[0][0].to_version
    assert len(await registry.history("chat")) == 1


async def test_two_concurrent_promotions_are_serialised(registry: Registry) -> None:
    """Without ``expected``: both land, one after the other; exactly one production version
    (the other is previous) and two history entries."""
    await registered(registry, 2)
    await asyncio.gather(
        registry.promote("chat", "production", "v1", actor="a"),
        registry.promote("chat", "production", "v2", actor="b"),
    )
    stages = await registry.stages("chat")
    assert {stages["production"], stages["previous"]} == {"v1", "v2"}
    history = await registry.history("chat")
    assert len(history) == 2
    first, second = reversed(history)
    assert first.from_version is None and second.from_version == first.to_version
    assert second.to_version == stages["production"]


async def test_many_concurrent_promotions_leave_one_production(registry: Registry) -> None:
    versions = await registered(registry, 6)
    await asyncio.gather(*(registry.promote("chat", "production", v, actor=v) for v in versions))
    history = await registry.history("chat")
    assert len(history) == 6
    chain = [h for h in reversed(history)]
    for before, after in zip(chain, chain[1:], strict=False):
        assert after.from_version == before.to_version  # no lost update
    assert (await registry.stages("chat"))["production"] == chain[-1].to_version


async def test_retention_keeps_the_last_three_production_versions(registry: Registry) -> None:
    versions = await registered(registry, 6)
    for v in versions[:5]:
        await registry.promote("chat", "production", v, actor="k")
    status = {v["version"]: v["status"] for v in (await registry.model("chat"))["versions"]}
    assert status == {"v1": "archived", "v2": "archived", "v3": "ready", "v4": "ready",
                      "v5": "ready", "v6": "ready"}  # fmt: skip
    with pytest.raises(Conflict):
        await registry.promote("chat", "production", "v1", actor="k")
    # a version held by another stage is not archived
    await registry.promote("chat", "staging", "v3", actor="k")
    await registry.promote("chat", "production", "v6", actor="k")
    status = {v["version"]: v["status"] for v in (await registry.model("chat"))["versions"]}
    assert status["v3"] == "ready" and status["v4"] == "ready"
    view = await registry.serving_view()
    assert ("chat", "v1") not in view.deployments and ("chat", "v6") in view.deployments
    assert view.stages["chat"]["production"] == "v6"


async def test_counter_moves_with_every_change(registry: Registry) -> None:
    start = await registry.counter()
    await registered(registry, 1)
    after_register = await registry.counter()
    assert after_register > start
    await registry.promote("chat", "production", "v1", actor="k")
    assert await registry.counter() > after_register
