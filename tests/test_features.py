"""The feature seam: the tuple of features is the request path, and the docs list it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.api.state import GATEWAY
from fleetgate.app import FEATURES, build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.feature import BaseFeature, Features
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.routing.ports import SEMANTIC, VERSION_PICKER, WAKER
from fleetgate.safety.ports import SAFETY
from fleetgate.tenancy.ports import TENANCY

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

EVERYTHING: dict[str, Any] = {
    "models": [
        {"alias": "tiny", "strategy": "kv-aware", "deployments": [
            {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]},
    ],
    "safety": {},
    "semantic": {"intents": {"chitchat": {"alias": "tiny"}}},
    "extensions": {"cost": {"pools": [{"alias": "tiny", "dcgm": ["http://127.0.0.1:9/metrics"]}]}},
}  # fmt: skip


def _settings(tmp_path: Path) -> Settings:
    return Settings(master_key="sk-m", data_dir=tmp_path, watch_config=False)


def _documented() -> list[str]:
    text = DOC.read_text("utf-8")
    block = text.split("<!-- features: begin -->")[1].split("<!-- features: end -->")[0]
    return re.findall(r"^\d+\. `([a-z-]+)`", block, flags=re.M)


def test_the_stage_order_is_the_feature_tuple(tmp_path: Path) -> None:
    state = build_state(_settings(tmp_path), parse_config(EVERYTHING))
    create_app(state.settings, state=state)
    names = state.features.names()
    assert names == [
        "core", "semantic", "tenancy", "multimodal", "safety", "cache", "scheduling", "canary",
        "engine-routing", "wake", "releases", "cost", "batches", "responses", "console",
        "litellm",
    ]  # fmt: skip
    assert [s.name for s in state.stages] == [
        "semantic", "tenancy", "multimodal", "safety", "scheduling"
    ]  # fmt: skip
    assert state.stages == state.features.stages()


def test_features_meet_through_the_ports_they_provide_when_built(tmp_path: Path) -> None:
    state = build_state(_settings(tmp_path), parse_config(EVERYTHING))
    create_app(state.settings, state=state)
    ports, dispatcher = state.core.ports, state.dispatcher
    tenancy, safety = ports.require(TENANCY), ports.require(SAFETY)
    assert ports.require(SEMANTIC) is state.features.all[1].stage  # the semantic router
    assert "auto" in state.core.virtual_aliases  # the alias it resolves: accepted as a model
    # the dispatcher took its ports: rollouts then canary splits, the waker, tenancy's limits
    assert dispatcher.versions is ports.require(VERSION_PICKER)
    assert dispatcher.waker is ports.require(WAKER)
    assert dispatcher.fallback_gate is not None
    # the authenticator chain: the master key, then tenancy's keys
    assert state.core.auth.authenticate("sk-m").is_master
    assert tenancy.stage is state.stages[1] and safety.stage is state.stages[3]
    assert all(hasattr(cls, "build") for cls in FEATURES)  # one constructor: build(core)


def test_docs_architecture_lists_the_features_in_order(tmp_path: Path) -> None:
    state = build_state(_settings(tmp_path), parse_config(EVERYTHING))
    create_app(state.settings, state=state)
    assert _documented() == state.features.names()


def test_features_that_are_off_keep_their_admin_routes_but_no_stage(tmp_path: Path) -> None:
    config = {
        **EVERYTHING,
        "tenancy": {"enabled": False},
        "multimodal": {"enabled": False},
        "scheduling": {"enabled": False},
    }
    config.pop("safety")
    config.pop("semantic")
    config.pop("extensions")  # no `cost` section: no cost feature
    state = build_state(_settings(tmp_path), parse_config(config))
    app = create_app(state.settings, state=state)
    assert state.features.names() == [
        "core", "tenancy", "safety", "cache", "scheduling", "canary", "engine-routing", "wake",
        "releases", "batches", "responses", "litellm",
    ]  # fmt: skip
    assert state.stages == []
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert "/admin/teams" in paths and "/admin/safety/policies" in paths
    assert "/admin/queues" in paths and "/admin/registry/models" in paths
    assert "/v1/audio/speech" not in paths
    assert (
        state.core.ports.get(TENANCY) is None
        and state.core.ports.get(SAFETY) is None
        and state.core.ports.get(MULTIMODAL) is None
    )


class Recorder(BaseFeature):
    def __init__(self, name: str, log: list[str], fail_start: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail_start = fail_start

    def reconfigure(self, config: GatewayConfig) -> None:
        self.log.append(f"reconfigure {self.name}")

    async def start(self) -> None:
        if self.fail_start:
            raise RuntimeError("cannot start")
        self.log.append(f"start {self.name}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


async def test_features_start_in_order_and_close_in_reverse() -> None:
    log: list[str] = []
    features = Features([Recorder("a", log), Recorder("b", log), Recorder("c", log)])
    await features.start()
    await features.aclose()
    assert log == ["start a", "start b", "start c", "close c", "close b", "close a"]


async def test_a_feature_that_fails_to_start_closes_those_started_before_it() -> None:
    log: list[str] = []
    features = Features([Recorder("a", log), Recorder("b", log, fail_start=True)])
    app = web.Application()
    lifespan = features.lifespan(app)
    with pytest.raises(RuntimeError):
        await anext(lifespan)
    assert log == ["start a", "close a"]


def test_feature_names_are_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        Features([Recorder("a", []), Recorder("a", [])])


class RegionTag(BaseFeature):
    """The worked example of docs/architecture.md."""

    name = "region-tag"

    def __init__(self, region: str) -> None:
        self.region = region
        self.stage = self

    async def before(self, req: GatewayRequest) -> None:
        req.response_headers["x-fleetgate-region"] = self.region

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        outcome.tags["region"] = self.region

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/admin/region", self.show)]

    async def show(self, request: web.Request) -> web.Response:
        return web.json_response({"region": self.region})


async def test_a_plugged_in_feature_runs_its_stage_serves_routes_and_reloads(
    tmp_path: Path,
) -> None:
    from tests.fakes import FakeUpstream

    async with FakeUpstream("a") as up:
        config = {
            "models": [{"alias": "tiny", "deployments": [
                {"provider": "openai", "model": "m", "api_base": up.url}]}],
            "tenancy": {"enabled": False},
        }  # fmt: skip
        log: list[str] = []
        settings = _settings(tmp_path)
        state = build_state(settings, parse_config(config))
        app = create_app(settings, state=state, extra=[RegionTag("eu-west"), Recorder("r", log)])
        async with TestClient(TestServer(app)) as client:
            assert log == ["start r"]
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            resp = await client.post(
                "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-m"}
            )
            assert resp.status == 200
            assert resp.headers["x-fleetgate-region"] == "eu-west"
            assert (await (await client.get("/admin/region")).json()) == {"region": "eu-west"}
            state.tables.apply(parse_config(config))
            assert "reconfigure r" in log
            assert app[GATEWAY] is state
        assert log[-1] == "close r"


def test_an_extensions_section_naming_no_feature_is_refused(tmp_path: Path) -> None:
    from fleetgate.errors import ConfigError

    config = {**EVERYTHING, "extensions": {"region-tagg": {"region": "eu"}}}
    state = build_state(_settings(tmp_path), parse_config(config))
    with pytest.raises(ConfigError, match="region-tagg"):
        create_app(state.settings, state=state, extra=[RegionTag("eu")])
    config = {**EVERYTHING, "extensions": {"region-tag": {"region": "eu"}}}
    state = build_state(_settings(tmp_path), parse_config(config))
    create_app(state.settings, state=state, extra=[RegionTag("eu")])
