"""The feature seam: the tuple of features is the request path, and the docs list it."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.api.path import REQUEST_PATH
from fleetgate.api.state import GATEWAY
from fleetgate.app import FEATURES, SECTIONS, build_state, create_app, switched_off
from fleetgate.config.loader import parse_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import ConfigError
from fleetgate.feature import BaseFeature, Features, Switch
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.routing.ports import SEMANTIC, VERSION_PICKER, WAKER
from fleetgate.safety.ports import SAFETY
from fleetgate.tenancy.ports import TENANCY
from tests.conftest import MASTER

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

EVERYTHING: dict[str, Any] = {
    "models": [
        {"alias": "tiny", "strategy": "kv-aware", "deployments": [
            {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]},
        {"alias": "idle", "deployments": [
            {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1",
             "name": "idle-a", "wake": {}}]},
    ],
    "safety": {},
    "reclaim": {"pools": [{"deployment": "idle-a"}]},
    "semantic": {"intents": {"chitchat": {"alias": "tiny"}}},
    "extensions": {"cost": {"pools": [{"alias": "tiny", "dcgm": ["http://127.0.0.1:9/metrics"]}]}},
    "insights": {},
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
        "engine-routing", "wake", "reclaim", "releases", "cost", "insights", "batches",
        "responses", "console", "litellm",
    ]  # fmt: skip
    assert [s.name for s in state.stages] == [
        "semantic", "tenancy", "multimodal", "safety", "scheduling", "reclaim", "insights"
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
    config.pop("reclaim")  # no `reclaim` section: no reclaim feature
    state = build_state(_settings(tmp_path), parse_config(config))
    app = create_app(state.settings, state=state)
    names = state.features.names()
    # switched off (the one rule): not built at all
    off = {"tenancy", "safety", "scheduling", "multimodal", "semantic", "cost", "reclaim"}
    assert not off & set(names)
    assert {"core", "cache", "canary", "releases", "batches", "responses"} <= set(names)
    assert state.stages == []
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert "/admin/teams" in paths and "/admin/safety/policies" in paths
    assert "/admin/queues" in paths and "/admin/registry/models" in paths
    assert "/admin/cost" in paths and "/admin/reclaim" in paths
    assert "/v1/audio/speech" not in paths
    assert (
        state.core.ports.get(TENANCY) is None
        and state.core.ports.get(SAFETY) is None
        and state.core.ports.get(MULTIMODAL) is None
    )


OFF = {
    "models": [{"alias": "tiny", "deployments": [
        {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]}],
    "tenancy": {"enabled": False},
    "scheduling": {"enabled": False},
    "safety": {"enabled": False},
}  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "section", "hint"),
    [
        ("GET", "/admin/teams", "tenancy", "set 'tenancy.enabled: true'"),
        ("DELETE", "/admin/keys/k1", "tenancy", "set 'tenancy.enabled: true'"),
        ("GET", "/admin/queues", "scheduling", "set 'scheduling.enabled: true'"),
        ("PUT", "/admin/safety/policies/p", "safety", "add a 'safety:' section"),
        ("GET", "/admin/cost", "cost", "add a 'cost:' section"),
    ],
)
async def test_a_switched_off_features_admin_routes_answer_one_503_naming_its_section(
    gateway: Any, method: str, path: str, section: str, hint: str
) -> None:
    client = await gateway(OFF)
    resp = await client.request(method, path, headers={"Authorization": f"Bearer {MASTER}"})
    error = (await resp.json())["error"]
    assert resp.status == 503, error
    assert error["code"] == "feature_disabled" and error["type"] == "service_unavailable"
    assert error["param"] == section and hint in error["message"]
    assert f"{method} " in error["message"]
    anonymous = await client.request(method, path)
    assert anonymous.status == 401  # nothing said about the config to a caller without a key


def test_each_declared_admin_route_is_served_when_the_feature_is_on(tmp_path: Path) -> None:
    """The routes a class declares for when it is off are the ones it serves when on."""
    state = build_state(_settings(tmp_path), parse_config(EVERYTHING))
    create_app(state.settings, state=state)
    built = {f.name: f for f in state.features.all}
    declared = [cls for cls in FEATURES if cls.admin_routes]
    assert {c.name for c in declared} >= {"tenancy", "safety", "scheduling", "cost"}
    for cls in declared:
        served = {
            (r.method, r.path) for r in built[cls.name].routes() if isinstance(r, web.RouteDef)
        }
        assert set(cls.admin_routes) <= served, cls.name


def test_every_switch_follows_one_rule(tmp_path: Path) -> None:
    """Off: ``enabled: false``, or an opt-in section absent; on otherwise."""
    base = parse_config({"models": OFF["models"]})
    assert Switch("batches").on(base) and not Switch("safety", opt_in=True).on(base)
    assert Switch("tenancy").on(base)
    pools = [{"alias": "tiny", "dcgm": ["http://127.0.0.1:9/m"]}]
    off = parse_config(
        {**OFF, "batches": {"enabled": False}, "cost": {"enabled": False, "pools": pools}}
    )
    assert not Switch("batches").on(off) and not Switch("tenancy").on(off)
    assert not Switch("safety", opt_in=True).on(off)  # present, but enabled: false
    assert not Switch("cost", opt_in=True).on(off)
    switched = {cls.name for cls in switched_off(off)}
    assert {"tenancy", "scheduling", "safety", "batches", "cost", "semantic"} <= switched
    state = build_state(_settings(tmp_path), off)
    create_app(state.settings, state=state)
    assert not switched & set(state.features.names())


def test_the_cost_section_is_top_level_and_the_old_place_still_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pools = {"pools": [{"alias": "tiny", "dcgm": ["http://127.0.0.1:9/metrics"]}]}
    new = {"models": OFF["models"], "cost": pools}
    state = build_state(_settings(tmp_path), parse_config(new, sections=SECTIONS))
    create_app(state.settings, state=state)
    assert "cost" in state.features.names() and not caplog.records
    with caplog.at_level(logging.WARNING, logger="fleetgate.config"):
        old = parse_config(
            {"models": OFF["models"], "extensions": {"cost": pools}}, sections=SECTIONS
        )
    assert "'extensions.cost' is deprecated" in caplog.text
    state = build_state(_settings(tmp_path), old)
    create_app(state.settings, state=state)
    assert "cost" in state.features.names()
    with pytest.raises(ConfigError, match="also given as the top-level 'cost:'"):
        parse_config({**new, "extensions": {"cost": pools}}, sections=SECTIONS)
    with pytest.raises(ConfigError, match=r"cost.pools\[0\]\(alias=tiny\).dcgm"):
        parse_config(
            {**new, "cost": {"pools": [{"alias": "tiny", "dcgm": ["x"]}]}}, sections=SECTIONS
        )


class OwnTeams(BaseFeature):
    name = "tenancy"

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/admin/teams", self.teams)]

    async def teams(self, request: web.Request) -> web.Response:
        return web.json_response({"data": ["own"]})


async def test_an_extra_feature_named_like_a_switched_off_one_serves_its_routes(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    state = build_state(settings, parse_config(OFF))
    app = create_app(settings, state=state, extra=[OwnTeams()])
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/admin/teams")
        assert resp.status == 200 and (await resp.json()) == {"data": ["own"]}


@pytest.mark.parametrize(
    "switch", [{"console": {"enabled": False}}, {"extensions": {"console": {"enabled": False}}}]
)
def test_the_console_is_switched_off_by_its_section_in_either_place(
    tmp_path: Path, switch: dict[str, Any]
) -> None:
    on = build_state(_settings(tmp_path), parse_config({"models": OFF["models"]}))
    create_app(on.settings, state=on)
    assert "console" in on.features.names()
    config = parse_config({"models": OFF["models"], **switch}, sections=SECTIONS)
    off = build_state(_settings(tmp_path), config)
    create_app(off.settings, state=off)
    assert "console" not in off.features.names() and "tenancy" in off.features.names()


def _names_read(module: str, source: str) -> set[str]:
    """What ``module`` takes from `fleetgate.api.state` (``GATEWAY_STATE``, ``GATEWAY``, ...)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "fleetgate.api.state":
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("fleetgate.api.state"))
        elif isinstance(node, ast.ImportFrom) and node.module == "fleetgate.api":
            out.update(f"fleetgate.api.{a.name}" for a in node.names if a.name == "state")
    return out


def test_only_the_core_feature_reads_the_gateway_state() -> None:
    """Features take what they need as typed ports (`REQUEST_PATH`, `TABLES`, ...): no module
    of a feature's package but the core feature's (``api/``, less the Responses feature
    inside it) imports `GatewayState`, its port `GATEWAY_STATE` or its app key."""
    src = Path(__file__).resolve().parents[1] / "src"
    packages = {cls.__module__.rsplit(".", 1)[0] for cls in FEATURES} - {"fleetgate.api"}
    assert {"fleetgate.batches", "fleetgate.api.responses", "fleetgate.console"} <= packages
    readers: dict[str, set[str]] = {}
    for path in sorted((src / "fleetgate").rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        if any(module == p or module.startswith(p + ".") for p in packages):
            names = _names_read(module, path.read_text("utf-8"))
            if names:
                readers[module] = names
    assert readers == {}
    # the scan sees what it looks for
    planted = "from fleetgate.api.state import GATEWAY_STATE\nfrom fleetgate.api import state\n"
    assert _names_read("x", planted) == {"GATEWAY_STATE", "fleetgate.api.state"}


def test_the_request_path_is_a_port_the_core_provides(tmp_path: Path) -> None:
    state = build_state(_settings(tmp_path), parse_config(EVERYTHING))
    create_app(state.settings, state=state)
    path = state.core.ports.require(REQUEST_PATH)
    by_name = {f.name: f for f in state.features.all}
    assert by_name["responses"].api.path is path  # type: ignore[attr-defined]
    assert by_name["batches"].worker.sender._path is path  # type: ignore[attr-defined]
    assert by_name["console"].console.tables is state.tables  # type: ignore[attr-defined]


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
    config = {**EVERYTHING, "extensions": {"region-tagg": {"region": "eu"}}}
    state = build_state(_settings(tmp_path), parse_config(config))
    with pytest.raises(ConfigError, match="region-tagg"):
        create_app(state.settings, state=state, extra=[RegionTag("eu")])
    config = {**EVERYTHING, "extensions": {"region-tag": {"region": "eu"}}}
    state = build_state(_settings(tmp_path), parse_config(config))
    create_app(state.settings, state=state, extra=[RegionTag("eu")])
