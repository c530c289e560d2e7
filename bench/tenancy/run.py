"""Tenancy overhead: auth + limits (Redis on loopback) against the gateway core alone.

Both gateways run against the same simulated upstream, in the same run and in alternating
rounds; the script prints the p50/p90 of the gateway's own overhead (``x-fleetgate-overhead-ms``)
and of the client-seen latency, and the p50 differences. By default the upstream and each
gateway are processes of their own (``fleetgate sim`` / ``fleetgate serve``), as deployed;
``--in-process`` puts everything on this process's event loop (the client included).

    PYTHONPATH=src python bench/tenancy/run.py --requests 2000 [--redis redis://127.0.0.1:6379/0]

Target: p50 added latency <= 0.3 ms. ``--throughput S`` then also drives each gateway with
wrk (one thread, 64 connections, S seconds, three alternating runs) and prints requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from fleetgate.app import create_app
from fleetgate.cli.processes import free_port, stop, wait_http
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.sim import SimConfig, running_sim

MASTER = "sk-bench-master"


def _config(upstream: str, tenancy: bool, prefix: str) -> GatewayConfig:
    return GatewayConfig.model_validate({
        "models": [{"alias": "tiny", "deployments": [{
            "provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1",
            "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}]}],
        "health": {"probe_interval_s": 60},
        "server": {"access_log": False},
        "tenancy": {"enabled": tenancy, "redis_prefix": prefix},
    })  # fmt: skip


async def _start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def _round(
    session: aiohttp.ClientSession, url: str, key: str, n: int, overhead: list[float],
    latency: list[float],
) -> None:  # fmt: skip
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}"}
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            await r.read()
            assert r.status == 200, await r.text()
            overhead.append(float(r.headers["x-fleetgate-overhead-ms"]))
        latency.append((time.perf_counter() - t0) * 1000)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    await asyncio.to_thread(wait_http, url, proc, 30.0)


@contextlib.asynccontextmanager
async def _processes(
    tmp: Path, redis_url: str | None, prefix: str
) -> AsyncIterator[tuple[str, str]]:
    """``fleetgate sim`` and two ``fleetgate serve`` (core, tenancy): (core URL, tenancy URL)."""
    procs: list[subprocess.Popen[bytes]] = []
    exe = [sys.executable, "-m", "fleetgate.cli.main"]
    env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER}
    if redis_url:
        env["FLEETGATE_REDIS_URL"] = redis_url
    try:
        sim_port = free_port()
        procs.append(subprocess.Popen([*exe, "sim", "--port", str(sim_port), "--output-len", "8"]))
        upstream = f"http://127.0.0.1:{sim_port}"
        await _wait(upstream + "/health", procs[-1])
        urls = []
        for name, tenancy in (("core", False), ("tenancy", True)):
            cfg = _config(upstream, tenancy, prefix).model_dump(mode="json", exclude_defaults=True)
            path = tmp / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            port = free_port()
            procs.append(subprocess.Popen(
                [*exe, "serve", "--config", str(path), "--port", str(port), "--no-watch",
                 "--data-dir", str(tmp / name)], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
            await _wait(urls[-1] + "/health/live", procs[-1])
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            stop(proc)


@contextlib.asynccontextmanager
async def _in_process(
    tmp: Path, redis_url: str | None, prefix: str
) -> AsyncIterator[tuple[str, str]]:
    async with running_sim(SimConfig(output_len=8)) as upstream:
        base = Settings(master_key=MASTER, data_dir=tmp / "core", watch_config=False)
        ten = Settings(master_key=MASTER, data_dir=tmp / "tenancy", redis_url=redis_url,
                       watch_config=False)  # fmt: skip
        core_runner, core_url = await _start(create_app(base, _config(upstream, False, prefix)))
        ten_runner, ten_url = await _start(create_app(ten, _config(upstream, True, prefix)))
        try:
            yield core_url, ten_url
        finally:
            await ten_runner.cleanup()
            await core_runner.cleanup()


_WRK_LUA = """\
wrk.method = "POST"
wrk.body = '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
"""


def _wrk(url: str, key: str, seconds: int, tmp: Path) -> tuple[float, int]:
    """Requests/s and non-2xx responses of one wrk run (one thread, 64 connections)."""
    script = tmp / f"wrk-{key[-6:]}.lua"
    script.write_text(_WRK_LUA % key)
    out = subprocess.run(
        ["wrk", "-t1", "-c64", f"-d{seconds}s", "-s", str(script), url + "/v1/chat/completions"],
        capture_output=True, text=True, timeout=seconds + 60, check=True,
    ).stdout  # fmt: skip
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rate, int(bad.group(1)) if bad else 0


async def _throughput(core_url: str, ten_url: str, key: str, seconds: int, tmp: Path) -> None:
    rates: dict[str, list[float]] = {"core": [], "tenancy": []}
    for _ in range(3):
        for name, url, k in (("core", core_url, MASTER), ("tenancy", ten_url, key)):
            rate, bad = await asyncio.to_thread(_wrk, url, k, seconds, tmp)
            assert bad == 0, f"{name}: {bad} non-2xx responses"
            rates[name].append(rate)
    core, ten = statistics.median(rates["core"]), statistics.median(rates["tenancy"])
    print(f"throughput, wrk -t1 -c64 -d{seconds}s, three alternating runs (requests/s):")
    for name, values in rates.items():
        print(f"{name:10} " + "  ".join(f"{v:8.0f}" for v in values))
    print(f"median: core {core:.0f}, tenancy {ten:.0f} = {ten / core:.3f}x core")


async def main(
    requests: int, redis_url: str | None, rounds: int, in_process: bool, throughput: int
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fg-bench-tenancy-"))
    prefix = f"fgbench:{os.urandom(4).hex()}:"
    gateways = _in_process if in_process else _processes
    async with gateways(tmp, redis_url, prefix) as (core_url, ten_url):
        async with aiohttp.ClientSession() as session:
            h = {"Authorization": f"Bearer {MASTER}"}
            async with session.post(ten_url + "/admin/teams", headers=h,
                                    json={"name": "bench", "rpm": 10**7}) as r:  # fmt: skip
                team = await r.json()
            async with session.post(ten_url + "/admin/keys", headers=h, json={
                    "team": team["id"], "rpm": 10**7, "tpm": 10**9, "max_parallel": 1000,
                    "max_budget_usd": 10**6}) as r:  # fmt: skip
                key = (await r.json())["key"]
            await asyncio.sleep(1.0)  # the new key reaches the cache
            stats: dict[str, tuple[list[float], list[float]]] = {
                "core": ([], []), "tenancy": ([], []),
            }  # fmt: skip
            await _round(session, core_url, MASTER, 50, [], [])  # warm up
            await _round(session, ten_url, key, 50, [], [])
            per = max(1, requests // rounds)
            for _ in range(rounds):
                await _round(session, core_url, MASTER, per, *stats["core"])
                await _round(session, ten_url, key, per, *stats["tenancy"])
            if throughput:
                await _throughput(core_url, ten_url, key, throughput, tmp)
    mode = f"Redis {redis_url}" if redis_url else "in-process limiter"
    where = "one process" if in_process else "upstream and gateways in their own processes"
    print(f"tenancy overhead ({mode}; {where}), {requests} requests each, {rounds} rounds")
    print(f"{'target':10} {'overhead p50':>13} {'p90':>8} {'latency p50':>12} {'p90':>8}  (ms)")
    for name, (ov, lat) in stats.items():
        print(f"{name:10} {_pct(ov, 50):13.3f} {_pct(ov, 90):8.3f} "
              f"{_pct(lat, 50):12.3f} {_pct(lat, 90):8.3f}")  # fmt: skip
    added = _pct(stats["tenancy"][0], 50) - _pct(stats["core"][0], 50)
    added_e2e = _pct(stats["tenancy"][1], 50) - _pct(stats["core"][1], 50)
    print(f"added p50: {added:.3f} ms (gateway overhead), {added_e2e:.3f} ms (client latency)")
    ok = "met" if max(added, added_e2e) <= 0.3 else "NOT met"
    print(f"target <= 0.300 ms on both measures: {ok}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                        help="Redis URL; empty for the in-process limiter")  # fmt: skip
    parser.add_argument("--in-process", action="store_true",
                        help="upstream, gateways and client on one event loop")  # fmt: skip
    parser.add_argument("--throughput", type=int, default=0, metavar="S",
                        help="also measure requests/s with wrk for S seconds per run")  # fmt: skip
    args = parser.parse_args()
    if args.throughput and shutil.which("wrk") is None:
        parser.error("--throughput needs wrk (apt-get install wrk)")
    asyncio.run(
        main(args.requests, args.redis or None, args.rounds, args.in_process, args.throughput)
    )
