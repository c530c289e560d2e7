"""Region failover: a gateway prefers its own region's deployments, moves new traffic to the
next region when they all fail, and no request that had not started streaming fails."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from fleetgate.cli.processes import stop, wait_http
from fleetgate.config.schema import DeploymentConfig
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.regions import RegionPreference
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory
from tests.procs import free_port


def _dep(name: str, region: str | None) -> Deployment:
    config = DeploymentConfig(model="m", api_base="http://x", name=name, region=region)
    return Deployment(name, "a", config, provider=None)  # type: ignore[arg-type]


def test_narrow_prefers_local_then_failover_order_then_rest() -> None:
    eu, us, ap, anywhere = (_dep(n, r) for n, r in [("eu", "eu"), ("us", "us"), ("ap", "ap"),
                                                    ("any", None)])  # fmt: skip
    prefs = RegionPreference("eu", ("us", "ap"))
    assert prefs.narrow([us, eu, ap, anywhere]) == [eu, anywhere]
    assert prefs.narrow([ap, us]) == [us]
    assert prefs.narrow([ap]) == [ap]
    assert RegionPreference("eu", ()).narrow([ap, us]) == [ap, us]  # unlisted: together
    off = RegionPreference(None)
    assert not off.active and off.narrow([us, eu]) == [us, eu]


@contextmanager
def _killable_sims(count: int, *args: str) -> Iterator[tuple[list[str], list[Any]]]:
    """``fleetgate sim`` processes (so a test can SIGKILL them); yields (URLs, processes)."""
    with ExitStack() as stack:
        urls, procs = [], []
        for _ in range(count):
            port = free_port()
            cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port), *args]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stack.callback(stop, proc)
            urls.append(f"http://127.0.0.1:{port}")
            procs.append(proc)
        for url, proc in zip(urls, procs, strict=True):
            wait_http(f"{url}/health", proc)
        yield urls, procs


def _config(region_a: list[str], region_b: list[str]) -> dict[str, Any]:
    deps = [
        {"model": "tiny", "api_base": f"{u}/v1", "name": f"{region}{i}", "region": region}
        for region, urls in (("eu", region_a), ("us", region_b))
        for i, u in enumerate(urls)
    ]
    return {
        "models": [{"alias": "tiny", "deployments": deps}],
        "router": {"region": "eu", "region_failover": ["us"], "num_retries": 1,
                   "retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "health": {"probe_interval_s": 0.2},
    }  # fmt: skip


BODY = {"model": "tiny", "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": "word " * 200}]}  # fmt: skip


async def _stream(client: Any) -> tuple[int, str, str]:
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    text = await resp.text()
    return resp.status, resp.headers.get("x-fleetgate-deployment", ""), text


@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_region_down_moves_traffic_and_fails_no_unstarted_request(
    gateway: GatewayFactory,
) -> None:
    # region eu: slow prefill (about 2 s to a first token), so requests are caught unstarted
    slow = ("--mode", "echo", "--prefill-ms-per-token", "10", "--decode-ms-per-step", "1")
    async with (
        running_sim(SimConfig(mode="echo")) as us0,
        running_sim(SimConfig(mode="echo")) as us1,
    ):
        with _killable_sims(2, *slow) as (eu, procs):
            client = await gateway(_config(eu, [us0, us1]))
            pending = [asyncio.create_task(_stream(client)) for _ in range(6)]
            await asyncio.sleep(0.8)  # all six are waiting for eu's first token
            for proc in procs:
                proc.kill()
            caught = await asyncio.gather(*pending)
        # none had started streaming: every one was retried in us and served whole
        assert [status for status, _, _ in caught] == [200] * 6
        assert all(dep.startswith("us") and "[DONE]" in text for _, dep, text in caught)
        after = await asyncio.gather(*(_stream(client) for _ in range(10)))
        assert all(s == 200 and d.startswith("us") for s, d, _ in after)


async def test_local_region_is_preferred_while_healthy(gateway: GatewayFactory) -> None:
    async with running_sim(SimConfig(mode="echo")) as eu, running_sim(SimConfig(mode="echo")) as us:
        client = await gateway(_config([eu], [us]))
        served = await asyncio.gather(*(_stream(client) for _ in range(8)))
        assert {d for _, d, _ in served} == {"eu0"}
