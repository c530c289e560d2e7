"""The picker's endpoints follow the InferencePool's pods (``fleetgate epp --pool-name``).

The real ``kubernetes`` client reads a real HTTP server speaking the API (`FakePoolApi`): the
pool, its pods listed then watched. Shown through the real picker (`EppServer`: its picks and
its gRPC readiness): ready pods of the selector are the alias's deployments (one per pod, from
the config's template), a pod added, ready, unready, deleted or moved changes the picks; not
ready before the first list; the API server gone, the last set serves, and it catches up once
back; a watch told 410 Gone lists again; the pool's selector and ports followed; the picker as
a process on the command line's flags.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.config.loader import parse_config
from fleetgate.config.schema import DeploymentConfig, KvEventsConfig
from fleetgate.epp.exchange import EppOptions
from fleetgate.epp.pool import Endpoint, endpoints_of, pool_spec
from fleetgate.epp.pool_api import PoolApi, api_client
from fleetgate.epp.pool_follow import PoolFollower, deployment_at
from fleetgate.epp.pool_watch import PoolWatch
from fleetgate.epp.server import EppServer
from fleetgate.errors import ConfigError, NoHealthyDeployment
from tests.conftest import GatewayFactory
from tests.epp.kube_pool_api import FakePoolApi, threaded_pool_api
from tests.epp.procs import epp_process, health_status
from tests.routing.support import route_ctx

pytest.importorskip("kubernetes", reason="pip install 'fleetgate[kube]'")

TEMPLATE = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "api_base": "http://engine:8000/v1",
            "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.2}}  # fmt: skip
CONFIG = {"models": [{"alias": "chat", "strategy": "round-robin", "deployments": [TEMPLATE]}]}


async def _eventually(check: Callable[[], bool], what: str, limit_s: float = 5.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {limit_s} s: {what}")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[FakePoolApi]:
    fake = FakePoolApi()
    await fake.start()
    fake.put_pool("chat-pool")
    try:
        yield fake
    finally:
        await fake.stop()


class Picker:
    """A gateway with the pool's alias, its pool watch and its `EppServer`."""

    def __init__(self, gw: GatewayState, watch: PoolWatch, server: EppServer) -> None:
        self.gw, self.watch, self.server = gw, watch, server

    async def picks(self, n: int = 6) -> set[str]:
        """The endpoints of ``n`` picks (round-robin: every deployment within the alias's)."""
        out: set[str] = set()
        for _ in range(n):
            choice = await self.server.picker.choose(route_ctx("chat").request, None)  # type: ignore[arg-type]
            out.add(choice.endpoints[0])
            await choice.release(None)
        return out

    def deployments(self) -> dict[str, str]:
        return {d.id: d.config.api_base for d in self.gw.tables.table.route("chat").deployments}

    async def readiness(self) -> str:
        reply = await self.server.health.Check(
            health_pb2.HealthCheckRequest(service="readiness"), None
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


@pytest.fixture
async def picker(
    gateway: GatewayFactory, api: FakePoolApi, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[Picker]]]:
    made: list[Picker] = []

    async def make() -> Picker:
        client = await gateway(CONFIG)
        gw = client.app[GATEWAY]
        follower = PoolFollower(gw.tables, "chat")
        pool_api = PoolApi(api_client(str(api.kubeconfig(tmp_path / "kubeconfig"))), "default",
                           "chat-pool", watch_timeout_s=2, request_timeout_s=2)  # fmt: skip
        watch = PoolWatch(pool_api, follower.update, backoff_s=0.05, backoff_max_s=0.2)
        server = EppServer(gw, EppOptions(), port=0, endpoints_synced=watch.is_synced)
        server.follow_s = 0.05
        await server.start()
        made.append(Picker(gw, watch, server))
        return made[-1]

    yield make
    for p in made:
        await p.watch.aclose()
        await p.server.aclose(grace_s=0.1)


def _pod(name: str, ip: str | None, *, ready: bool = True, labels: Any = None,
         deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "labels": labels or {"app": "engine"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T05:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready",
                                              "status": "True" if ready else "False"}]}  # fmt: skip
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_an_endpoint_is_a_ready_addressed_live_pod_of_the_selector_per_port() -> None:
    pool = {"spec": {"selector": {"matchLabels": {"app": "engine"}},
                     "targetPorts": [{"number": 8000}]}}  # fmt: skip
    spec = pool_spec(pool)
    pods = [_pod("b", "10.0.0.2"), _pod("a", "10.0.0.1"), _pod("unready", "10.0.0.3", ready=False),
            _pod("no-ip", None), _pod("going", "10.0.0.4", deleting=True),
            _pod("other", "10.0.0.5", labels={"app": "other"}), _pod("v6", "fd00::7")]  # fmt: skip
    assert [e.address for e in endpoints_of(pods, spec)] == [
        "10.0.0.1:8000", "10.0.0.2:8000", "[fd00::7]:8000"]  # fmt: skip
    pool["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8001}]
    ranks = endpoints_of([_pod("a", "10.0.0.1")], pool_spec(pool))
    assert [(e.name, e.address) for e in ranks] == [("a-rank-0", "10.0.0.1:8000"),
                                                    ("a-rank-1", "10.0.0.1:8001")]  # fmt: skip
    with pytest.raises(ValueError, match="targetPorts"):
        pool_spec({"spec": {"selector": {"matchLabels": {"app": "engine"}}}})


def test_a_pods_deployment_is_the_template_at_the_pods_address() -> None:
    kv = KvEventsConfig(endpoint="tcp://engine:5557", replay_endpoint="tcp://engine:5558")
    template = DeploymentConfig(**TEMPLATE, kv_events=kv, rpm=60)  # type: ignore[arg-type]
    dep = deployment_at(template, Endpoint("engine-7f9c", "10.1.2.3", 8000))
    assert (dep.name, dep.api_base, dep.model, dep.rpm) == (
        "engine-7f9c", "http://10.1.2.3:8000/v1", TEMPLATE["model"], 60)  # fmt: skip
    assert dep.kv_events is not None
    assert (dep.kv_events.endpoint, dep.kv_events.replay_endpoint) == (
        "tcp://10.1.2.3:5557", "tcp://10.1.2.3:5558")  # fmt: skip
    assert template.api_base == "http://engine:8000/v1"  # the template itself unchanged


async def test_a_pool_alias_needs_one_template_deployment(gateway: GatewayFactory) -> None:
    two = {"models": [{"alias": "chat", "deployments": [TEMPLATE, TEMPLATE]}]}
    gw = (await gateway(two)).app[GATEWAY]
    with pytest.raises(ConfigError, match="exactly one deployment"):
        PoolFollower(gw.tables, "chat")
    with pytest.raises(ConfigError, match="no such alias"):
        PoolFollower(gw.tables, "other")


async def test_the_picks_follow_the_pods(
    api: FakePoolApi, picker: Callable[[], Awaitable[Picker]]
) -> None:
    api.put_pod("engine-0", "10.0.0.1")
    api.put_pod("engine-1", "10.0.0.2", ready=False)
    api.put_pod("intruder", "10.0.0.9", labels={"app": "other"})
    p = await picker()
    # before the first list: not ready, and the template never serves
    assert await p.readiness() == "NOT_SERVING"
    assert p.deployments() == {}
    with pytest.raises(NoHealthyDeployment):
        await p.picks(1)

    await p.watch.start()
    await _eventually(p.watch.is_synced, "synced")
    assert p.deployments() == {"engine-0": "http://10.0.0.1:8000/v1"}
    assert await p.picks() == {"10.0.0.1:8000"}  # neither the unready pod nor another label's
    await _eventually(lambda: p.server.ready, "ready")
    assert await p.readiness() == "SERVING"
    state = p.gw.tables.table.route("chat").deployments[0].state

    api.put_pod("engine-1", "10.0.0.2", ready=True)  # became ready
    await _eventually(lambda: len(p.deployments()) == 2, "engine-1 ready")
    assert await p.picks() == {"10.0.0.1:8000", "10.0.0.2:8000"}
    kept = {d.id: d.state for d in p.gw.tables.table.route("chat").deployments}
    assert kept["engine-0"] is state  # as on a config reload: a pod that stays keeps its state

    api.put_pod("engine-2", "10.0.0.3")  # added
    api.delete_pod("engine-0")  # deleted
    api.put_pod("engine-1", "10.0.0.12")  # the same pod name at another IP
    now = {"http://10.0.0.12:8000/v1", "http://10.0.0.3:8000/v1"}
    await _eventually(lambda: set(p.deployments().values()) == now, "added, deleted, moved")
    assert await p.picks() == {"10.0.0.12:8000", "10.0.0.3:8000"}

    api.put_pod("engine-2", "10.0.0.3", ready=False)  # unready
    api.put_pod("engine-1", "10.0.0.12", deleting=True)  # terminating
    await _eventually(lambda: p.deployments() == {}, "none ready")
    with pytest.raises(NoHealthyDeployment):
        await p.picks(1)
    assert p.watch.lists == 1  # all of it from the one watch
    assert await p.readiness() == "SERVING"  # synced: an empty pool is still a known one


async def test_a_config_reload_takes_the_new_template_and_keeps_the_pods(
    api: FakePoolApi, picker: Callable[[], Awaitable[Picker]]
) -> None:
    api.put_pod("engine-0", "10.0.0.1")
    p = await picker()
    await p.watch.start()
    await _eventually(p.watch.is_synced, "synced")
    changed = {**TEMPLATE, "model": "other-model", "api_base": "https://ignored:1/v2"}
    p.gw.tables.apply(parse_config({"models": [{**CONFIG["models"][0], "deployments": [changed]}]}))
    (dep,) = p.gw.tables.table.route("chat").deployments
    assert (dep.id, dep.config.model, dep.config.api_base) == (
        "engine-0", "other-model", "https://10.0.0.1:8000/v2")  # fmt: skip
    two = {"models": [{"alias": "chat", "deployments": [TEMPLATE, TEMPLATE]}]}
    with pytest.raises(ConfigError, match="exactly one deployment"):
        p.gw.tables.apply(parse_config(two))  # refused: the old table stays
    assert p.gw.tables.table.route("chat").deployments[0].config.model == "other-model"


async def test_the_last_set_serves_while_the_api_is_down_and_it_catches_up(
    api: FakePoolApi, picker: Callable[[], Awaitable[Picker]]
) -> None:
    api.put_pod("engine-0", "10.0.0.1")
    p = await picker()
    await p.watch.start()
    await _eventually(p.watch.is_synced, "synced")

    await api.stop()  # unreachable: connections refused
    api.put_pod("engine-1", "10.0.0.2")  # changes the picker cannot see yet
    api.delete_pod("engine-0")
    await _eventually(lambda: p.watch.failures >= 2, "retried with backoff")
    assert await p.picks() == {"10.0.0.1:8000"}  # the last set known
    assert p.server.ready

    await api.start()
    await _eventually(lambda: p.deployments() == {"engine-1": "http://10.0.0.2:8000/v1"},
                      "caught up")  # fmt: skip
    assert await p.picks() == {"10.0.0.2:8000"}
    assert p.watch.failures == 0


async def test_a_watch_told_410_gone_lists_again(
    api: FakePoolApi, picker: Callable[[], Awaitable[Picker]]
) -> None:
    api.put_pod("engine-0", "10.0.0.1")
    p = await picker()
    await p.watch.start()
    await _eventually(p.watch.is_synced, "synced")
    lists = api.lists("pods")

    api.compact()  # the history the watches resume from is gone
    api.end_watches()  # they resume: ERROR 410 Gone
    await _eventually(lambda: p.watch.lists == 2, "listed again")
    assert api.lists("pods") == lists + 1
    api.put_pod("engine-1", "10.0.0.2")  # and watched from the new list's version
    await _eventually(lambda: len(p.deployments()) == 2, "watching again")
    assert await p.picks() == {"10.0.0.1:8000", "10.0.0.2:8000"}


async def test_the_pools_selector_and_ports_are_followed(
    api: FakePoolApi, picker: Callable[[], Awaitable[Picker]]
) -> None:
    api.put_pod("blue-0", "10.0.0.1", labels={"app": "engine", "track": "blue"})
    api.put_pod("green-0", "10.0.0.2", labels={"app": "engine", "track": "green"})
    api.put_pool("chat-pool", selector={"track": "blue"})
    p = await picker()
    await p.watch.start()
    await _eventually(p.watch.is_synced, "synced")
    assert p.deployments() == {"blue-0": "http://10.0.0.1:8000/v1"}

    api.put_pool("chat-pool", selector={"track": "green"})  # a new selector: listed again
    await _eventually(lambda: p.deployments() == {"green-0": "http://10.0.0.2:8000/v1"},
                      "the new selector's pods")  # fmt: skip
    api.put_pool("chat-pool", selector={"track": "green"}, ports=(8000, 8001))  # two ranks
    await _eventually(lambda: len(p.deployments()) == 2, "a deployment per port")
    assert await p.picks() == {"10.0.0.2:8000", "10.0.0.2:8001"}

    api.delete_pool("chat-pool")  # gone: nothing to pick and not ready
    await _eventually(lambda: not p.watch.synced and p.deployments() == {}, "pool deleted")
    await _eventually(lambda: not p.server.ready, "not ready")
    api.put_pool("chat-pool", selector={"track": "blue"})
    await _eventually(lambda: p.server.ready and len(p.deployments()) == 1, "pool back")


def test_the_picker_process_watches_the_pool_named_on_its_command_line(tmp_path: Path) -> None:
    with threaded_pool_api() as (api, edit):
        edit(api.put_pod, "engine-0", "10.0.0.1")
        args = ["--pool-name", "chat-pool", "--pool-namespace", "default",
                "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig"))]  # fmt: skip
        with epp_process(CONFIG, tmp_path, master_key="sk-pool", args=args) as epp:
            # no pool yet: alive, not ready
            assert health_status(epp.grpc_port, "liveness") == "SERVING"
            assert health_status(epp.grpc_port, "readiness") == "NOT_SERVING"
            edit(api.put_pool, "chat-pool")
            deadline = time.monotonic() + 10
            while health_status(epp.grpc_port, "readiness") != "SERVING":
                assert time.monotonic() < deadline, "not ready within 10 s of the pool"
                time.sleep(0.05)
            assert any(path.endswith("/pods") and q.get("watch") == "true"
                       for path, q in list(api.calls))  # fmt: skip
