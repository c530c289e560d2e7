"""Rollout overhead on the request path: a gateway serving an alias under a running rollout
(the `RolloutPicker` choosing a version per request, the releases stage counting outcomes and
recording a row per request, the background flush and driver writing them) against the same
gateway serving the alias from the registry with no rollout (``registry``), and against a
plain alias with no registry at all (``plain``).

The three gateways run in this process against one simulated upstream with no latency of its
own, in alternating rounds of sequential requests; each run prints the client-seen p50 and
the gateway's own overhead p50 (``x-fleetgate-overhead-ms``, the time before the upstream
call: the picker's part) of each, and the ratios rollout / registry and registry / plain.
``--runs 5`` prints the median of five runs.
A micro-benchmark also times the two per-request calls alone (`RolloutPicker.narrow`,
`OutcomeBook.observe`).

    PYTHONPATH=src python bench/releases/run.py --requests 1500 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.api.state import GATEWAY
from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.http.serving import served
from fleetgate.releases.feature import ReleasesFeature
from fleetgate.releases.outcomes import OutcomeBook
from fleetgate.sim import SimConfig, running_sim

MASTER = "sk-bench-releases"
AUTH = {"Authorization": f"Bearer {MASTER}"}


@dataclass
class Side:
    name: str
    url: str
    latency: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)


def _config(upstream: str, registry: bool) -> GatewayConfig:
    alias: dict[str, Any] = {"alias": "chat"}
    if registry:
        alias["registry"] = {"model": "chat", "stage": "production"}
    else:
        alias["deployments"] = [{"model": "tiny", "api_base": f"{upstream}/v1", "name": "v1"}]
    return GatewayConfig.model_validate({
        "models": [alias], "tenancy": {"enabled": False},
        "health": {"probe_interval_s": 60},
        "releases": {"poll_interval_s": 0.5, "rollout": {"tick_s": 1.0, "flush_s": 1.0}},
    })  # fmt: skip


async def _admin(s: aiohttp.ClientSession, url: str, path: str, body: Any) -> Any:
    async with s.post(url + path, json=body, headers=AUTH) as resp:
        got = await resp.json()
        assert resp.status in (200, 201), got
        return got


async def _register(s: aiohttp.ClientSession, url: str, upstream: str) -> None:
    await _admin(s, url, "/admin/registry/models", {"name": "chat"})
    for n in (1, 2):
        await _admin(s, url, "/admin/registry/models/chat/versions", {
            "artifact_uri": f"s3://chat/{n}",
            "deployments": [{"model": "tiny", "api_base": f"{upstream}/v1", "name": f"v{n}"}],
        })  # fmt: skip
    await _admin(s, url, "/admin/registry/models/chat/promote",
                 {"stage": "production", "version": "v1"})  # fmt: skip


async def _rollout(s: aiohttp.ClientSession, url: str) -> None:
    # a rollout that stays at 50% for the whole bench (the interval is never reached)
    await _admin(s, url, "/admin/registry/rollouts", {
        "alias": "chat", "to": "v2", "steps": [50, 100], "interval_s": 86400, "force": True,
    })  # fmt: skip


async def _round(s: aiohttp.ClientSession, side: Side, n: int, keep: bool) -> set[str]:
    seen = set()
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for _ in range(n):
        t = time.perf_counter()
        async with s.post(side.url + "/v1/chat/completions", json=body, headers=AUTH) as r:
            await r.read()
            assert r.status == 200
            seen.add(r.headers["x-fleetgate-deployment"])
            overhead = float(r.headers["x-fleetgate-overhead-ms"])
        if keep:
            side.latency.append((time.perf_counter() - t) * 1000)
            side.overhead.append(overhead)
    return seen


async def one_run(requests: int, rounds: int) -> dict[str, float]:
    names = ("plain", "registry", "rollout")
    with tempfile.TemporaryDirectory() as tmp:
        async with running_sim(SimConfig(mode="echo")) as upstream:
            apps = {}
            for name in names:
                settings = Settings(master_key=MASTER, data_dir=Path(tmp) / name,
                                    watch_config=False)  # fmt: skip
                apps[name] = create_app(settings, _config(upstream, name != "plain"))
            async with contextlib.AsyncExitStack() as stack:
                urls = {n: await stack.enter_async_context(served(apps[n])) for n in names}
                s = await stack.enter_async_context(aiohttp.ClientSession())
                for name in ("registry", "rollout"):
                    await _register(s, urls[name], upstream)
                await _rollout(s, urls["rollout"])
                await asyncio.sleep(1.0)  # the follower applied the promotion and the rollout
                sides = [Side(n, urls[n]) for n in names]
                for side in sides:
                    await _round(s, side, 200, keep=False)  # warm up
                seen = set()
                for _ in range(rounds):
                    for side in sides:
                        got = await _round(s, side, requests // rounds, keep=True)
                        if side.name == "rollout":
                            seen |= got
                assert seen == {"v1", "v2"}, seen  # the rollout really split the traffic
                feature = next(f for f in apps["rollout"][GATEWAY].features.all
                               if isinstance(f, ReleasesFeature))  # fmt: skip
                await feature.book.flush()
    p = {side.name: side for side in sides}
    out = {}
    for what in ("latency", "overhead"):
        for name in names:
            out[f"{name}_{what}_p50_ms"] = statistics.median(getattr(p[name], what))
        out[f"{what}_rollout_vs_registry"] = (
            out[f"rollout_{what}_p50_ms"] / out[f"registry_{what}_p50_ms"]
        )
        out[f"{what}_registry_vs_plain"] = (
            out[f"registry_{what}_p50_ms"] / out[f"plain_{what}_p50_ms"]
        )
    return out


def micro(n: int = 200_000) -> dict[str, float]:
    """Microseconds per call of the picker's choice and the stage's bookkeeping."""
    from fleetgate.releases.follow import RolloutPicker
    from fleetgate.releases.rollouts import Rollout
    from fleetgate.routing.context import RouteContext

    class _Dep:
        def __init__(self, version: str) -> None:
            self.version = version

            class _State:
                @staticmethod
                def healthy(now: float) -> bool:
                    return True

            self.state = _State()

    class _Follower:
        rollouts = {"chat": Rollout("chat", "chat", "v1", "v2", [50, 100], 0, 50.0, "running",
                                    300, 50, 0, None, None, 0, 1, 0, 0)}  # fmt: skip

    req = GatewayRequest(
        request_id="r", endpoint=Endpoint.CHAT, principal=Principal("k"),
        body={"messages": [{"role": "user", "content": "hi"}]}, alias="chat", stream=False,
        want_usage=False, prompt_tokens=1, max_tokens=1,
    )  # fmt: skip
    picker = RolloutPicker(_Follower(), None)  # type: ignore[arg-type]
    deps = [_Dep("v1"), _Dep("v2")]
    ctx = RouteContext(req)
    t = time.perf_counter()
    for _ in range(n):
        picker.narrow("chat", deps, ctx)  # type: ignore[arg-type]
    pick_us = (time.perf_counter() - t) / n * 1e6
    out = Outcome(alias="chat", version="v2", attempts=1, latency_s=0.01, deployment="d")
    book = OutcomeBook(None, replica="r", tracked=lambda a: a == "chat",  # type: ignore[arg-type]
                       recorded=lambda a: a == "chat")  # fmt: skip
    t = time.perf_counter()
    for i in range(n // 10):
        book.observe(req, out)
        if i % 1000 == 0:
            book._pending.clear()
    observe_us = (time.perf_counter() - t) / (n // 10) * 1e6
    idle = OutcomeBook(None, replica="r", tracked=lambda a: False)  # type: ignore[arg-type]
    t = time.perf_counter()
    for _ in range(n):
        idle.observe(req, out)
    idle_us = (time.perf_counter() - t) / n * 1e6
    return {"pick_us": pick_us, "observe_us": observe_us, "observe_no_rollout_us": idle_us}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        r = asyncio.run(one_run(args.requests, args.rounds))
        runs.append(r)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
    print("median of", args.runs, "runs:")
    for k in runs[0]:
        print(f"  {k}: {statistics.median(r[k] for r in runs):.3f}")
    for k, v in micro().items():
        print(f"  {k}: {v:.2f}")


if __name__ == "__main__":
    main()
