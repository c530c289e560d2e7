"""Tenancy overhead: auth + limits (Redis on loopback) against the gateway core alone.

Both gateways run against the same simulated upstream, in the same run and in alternating
rounds; the script prints the p50/p90 of the gateway's own overhead (``x-fleetgate-overhead-ms``)
and of the client-seen latency, and the p50 differences. By default the upstream and each
gateway are processes of their own (``fleetgate sim`` / ``fleetgate serve``), as deployed;
``--in-process`` puts everything on this process's event loop (the client included).

    PYTHONPATH=src python bench/tenancy/run.py --requests 2000 [--redis redis://127.0.0.1:6379/0]
    PYTHONPATH=src python bench/tenancy/run.py --runs 5                   # median of five runs
    PYTHONPATH=src python bench/tenancy/run.py --baseline-src /tmp/old/src   # before vs after
    PYTHONPATH=src python bench/tenancy/run.py --redis-delay-ms 0.25   # Redis 0.5 ms round trip

Target: p50 added latency <= 0.3 ms (with ``--runs N``: the median over the runs).
``--baseline-src`` also starts both gateways from another source tree (same interpreter and
dependencies) and measures all four in the same alternating rounds, so "no worse than before"
is judged on one machine state. ``--throughput S`` then also drives each gateway with wrk (one
thread, 64 connections, S seconds, three alternating runs) and prints requests/s.
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
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

import fleetgate
from fleetgate.app import create_app
from fleetgate.cli.processes import free_port, stop, wait_http
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.resp import RespClient
from fleetgate.sim import SimConfig, running_sim

MASTER = "sk-bench-master"
THIS_SRC = Path(fleetgate.__file__).resolve().parents[1]  # the tree this script imports
TARGET_MS = 0.3


@dataclass
class Gateway:
    """One measured gateway: ``tree`` is ``this`` or ``baseline``; ``key`` its bearer key."""

    tree: str
    tenancy: bool
    url: str
    key: str = MASTER
    overhead: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        kind = "tenancy" if self.tenancy else "core"
        return kind if self.tree == "this" else f"{kind}@{self.tree}"


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


async def _round(session: aiohttp.ClientSession, gw: Gateway, n: int, keep: bool = True) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {gw.key}"}
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
            await r.read()
            assert r.status == 200, f"{gw.name}: {r.status} {await r.text()}"
            overhead = float(r.headers["x-fleetgate-overhead-ms"])
        if keep:
            gw.overhead.append(overhead)
            gw.latency.append((time.perf_counter() - t0) * 1000)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    await asyncio.to_thread(wait_http, url, proc, 60.0)


@contextlib.asynccontextmanager
async def _processes(
    tmp: Path, redis_url: str | None, prefix: str, trees: dict[str, Path]
) -> AsyncIterator[list[Gateway]]:
    """``fleetgate sim`` and, per source tree, two ``fleetgate serve`` (core, tenancy)."""
    procs: list[subprocess.Popen[bytes]] = []
    exe = [sys.executable, "-m", "fleetgate.cli.main"]
    env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER, "PYTHONPATH": str(THIS_SRC)}
    if redis_url:
        env["FLEETGATE_REDIS_URL"] = redis_url
    try:
        sim_port = free_port()
        procs.append(subprocess.Popen([*exe, "sim", "--port", str(sim_port), "--output-len", "8"],
                                      env=env))  # fmt: skip
        upstream = f"http://127.0.0.1:{sim_port}"
        await _wait(upstream + "/health", procs[-1])
        gateways = []
        for tree, src in trees.items():
            for tenancy in (False, True):
                gw = Gateway(tree, tenancy, "")
                cfg = _config(upstream, tenancy, prefix)
                path = tmp / f"{gw.name}.yaml"
                path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_defaults=True)))
                port = free_port()
                procs.append(subprocess.Popen(
                    [*exe, "serve", "--config", str(path), "--port", str(port), "--no-watch",
                     "--data-dir", str(tmp / gw.name)], env={**env, "PYTHONPATH": str(src)},
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))  # fmt: skip
                gw.url = f"http://127.0.0.1:{port}"
                await _wait(gw.url + "/health/live", procs[-1])
                gateways.append(gw)
        yield gateways
    finally:
        for proc in procs:
            stop(proc)


@contextlib.asynccontextmanager
async def _in_process(
    tmp: Path, redis_url: str | None, prefix: str, trees: dict[str, Path]
) -> AsyncIterator[list[Gateway]]:
    async with running_sim(SimConfig(output_len=8)) as upstream:
        base = Settings(master_key=MASTER, data_dir=tmp / "core", watch_config=False)
        ten = Settings(master_key=MASTER, data_dir=tmp / "tenancy", redis_url=redis_url,
                       watch_config=False)  # fmt: skip
        core_runner, core_url = await _start(create_app(base, _config(upstream, False, prefix)))
        ten_runner, ten_url = await _start(create_app(ten, _config(upstream, True, prefix)))
        try:
            yield [Gateway("this", False, core_url), Gateway("this", True, ten_url)]
        finally:
            await ten_runner.cleanup()
            await core_runner.cleanup()


async def _virtual_key(session: aiohttp.ClientSession, url: str) -> str:
    """A team and a key with every limit (high enough never to refuse) on that gateway."""
    h = {"Authorization": f"Bearer {MASTER}"}
    async with session.post(url + "/admin/teams", headers=h,
                            json={"name": "bench", "rpm": 10**7}) as r:  # fmt: skip
        team = await r.json()
    async with session.post(url + "/admin/keys", headers=h, json={
            "team": team["id"], "rpm": 10**7, "tpm": 10**9, "max_parallel": 1000,
            "max_budget_usd": 10**6}) as r:  # fmt: skip
        key: str = (await r.json())["key"]
    return key


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


async def _throughput(gateways: list[Gateway], seconds: int, tmp: Path) -> None:
    rates: dict[str, list[float]] = {gw.name: [] for gw in gateways}
    for _ in range(3):
        for gw in gateways:
            rate, bad = await asyncio.to_thread(_wrk, gw.url, gw.key, seconds, tmp)
            assert bad == 0, f"{gw.name}: {bad} non-2xx responses"
            rates[gw.name].append(rate)
    print(f"throughput, wrk -t1 -c64 -d{seconds}s, three alternating runs (requests/s):")
    for name, values in rates.items():
        print(f"{name:18} " + "  ".join(f"{v:8.0f}" for v in values))
    core = statistics.median(rates["core"])
    print("median: " + ", ".join(f"{n} {statistics.median(v):.0f}" for n, v in rates.items())
          + f" (tenancy = {statistics.median(rates['tenancy']) / core:.3f}x core)")  # fmt: skip


def _added(gateways: list[Gateway], tree: str) -> tuple[float, float]:
    """p50 added by tenancy in ``tree``: (gateway overhead, client latency), ms."""
    core, ten = (
        next(g for g in gateways if g.tree == tree and g.tenancy is t) for t in (False, True)
    )
    return (
        _pct(ten.overhead, 50) - _pct(core.overhead, 50),
        _pct(ten.latency, 50) - _pct(core.latency, 50),
    )


def _report(gateways: list[Gateway]) -> None:
    print(f"{'target':18} {'overhead p50':>13} {'p90':>8} {'latency p50':>12} {'p90':>8}  (ms)")
    for gw in gateways:
        print(f"{gw.name:18} {_pct(gw.overhead, 50):13.3f} {_pct(gw.overhead, 90):8.3f} "
              f"{_pct(gw.latency, 50):12.3f} {_pct(gw.latency, 90):8.3f}")  # fmt: skip


async def _run(session: aiohttp.ClientSession, gateways: list[Gateway], requests: int,
               rounds: int) -> None:  # fmt: skip
    for gw in gateways:
        gw.overhead.clear()
        gw.latency.clear()
    per = max(1, requests // rounds)
    for _ in range(rounds):
        for gw in gateways:
            await _round(session, gw, per)


@contextlib.asynccontextmanager
async def _delayed(redis_url: str, delay_ms: float) -> AsyncIterator[str]:
    """``redis_url`` behind `delay_proxy` (a process of its own): Redis ``delay_ms`` away."""
    port = free_port()
    target = redis_url.split("://", 1)[1].split("/", 1)[0]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("delay_proxy.py")),
                             "--listen", str(port), "--target", target,
                             "--delay-ms", str(delay_ms)])  # fmt: skip
    try:
        for _ in range(100):  # bounded: up to 10 s for the proxy to listen
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        url = f"redis://127.0.0.1:{port}/" + redis_url.rsplit("/", 1)[1]
        client = RespClient(url, timeout_s=5.0)
        try:
            trips = []
            for _ in range(50):
                t0 = time.perf_counter()
                await client.call("PING")
                trips.append((time.perf_counter() - t0) * 1000)
        finally:
            await client.aclose()
        print(f"Redis behind a {delay_ms:g} ms (each way) proxy: PING round trip p50 "
              f"{statistics.median(trips):.3f} ms")  # fmt: skip
        yield url
    finally:
        stop(proc)


async def _measure(
    args: argparse.Namespace,
    gateways: list[Gateway],
    trees: dict[str, Path],
    added: dict[str, list[tuple[float, float]]],
    tmp: Path,
) -> None:
    async with aiohttp.ClientSession() as session:
        for gw in gateways:
            if gw.tenancy:
                gw.key = await _virtual_key(session, gw.url)
        await asyncio.sleep(1.0)  # the new keys reach the caches
        for gw in gateways:
            await _round(session, gw, 50, keep=False)  # warm up
        for run in range(args.runs):
            await _run(session, gateways, args.requests, args.rounds)
            print(f"run {run + 1}/{args.runs}:")
            _report(gateways)
            for tree in trees:
                added[tree].append(_added(gateways, tree))
        if args.throughput:
            await _throughput(gateways, args.throughput, tmp)


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fg-bench-tenancy-"))
    prefix = f"fgbench:{os.urandom(4).hex()}:"
    trees = {"this": THIS_SRC}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    starter = _in_process if args.in_process else _processes
    added: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    async with contextlib.AsyncExitStack() as stack:
        redis_url = args.redis or None
        if redis_url and args.redis_delay_ms:
            redis_url = await stack.enter_async_context(_delayed(redis_url, args.redis_delay_ms))
        gateways = await stack.enter_async_context(starter(tmp, redis_url, prefix, trees))
        await _measure(args, gateways, trees, added, tmp)
    mode = f"Redis {args.redis}" if args.redis else "in-process limiter"
    if args.redis and args.redis_delay_ms:
        mode += f" + {args.redis_delay_ms:g} ms each way"
    where = "one process" if args.in_process else "upstream and gateways in their own processes"
    print(f"\ntenancy overhead ({mode}; {where}), {args.requests} requests per gateway and run, "
          f"{args.rounds} alternating rounds, {args.runs} run(s)")  # fmt: skip
    print(f"{'tree':10} {'run':>4} {'added overhead p50':>19} {'added latency p50':>18}  (ms)")
    for tree, values in added.items():
        for i, (ov, lat) in enumerate(values, 1):
            print(f"{tree:10} {i:4} {ov:19.3f} {lat:18.3f}")
        ov_med = statistics.median(v[0] for v in values)
        lat_med = statistics.median(v[1] for v in values)
        ok = "met" if max(ov_med, lat_med) <= TARGET_MS else "NOT met"
        print(
            f"{tree:10} {'med':>4} {ov_med:19.3f} {lat_med:18.3f}  target <= {TARGET_MS:.3f}: {ok}"
        )
    if args.baseline_src is not None:
        this = statistics.median(v[1] for v in added["this"])
        before = statistics.median(v[1] for v in added["baseline"])
        print(f"added latency p50, this tree - baseline ({args.baseline_src}): "
              f"{this - before:+.3f} ms")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="per gateway and run")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="measure this many times (same processes); report the median",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                        help="Redis URL; empty for the in-process limiter")  # fmt: skip
    parser.add_argument("--redis-delay-ms", type=float, default=0.0, metavar="MS",
                        help="Redis MS away each way (a proxy process)")  # fmt: skip
    parser.add_argument("--in-process", action="store_true",
                        help="upstream, gateways and client on one event loop")  # fmt: skip
    parser.add_argument(
        "--baseline-src",
        type=Path,
        metavar="SRC",
        help="also run both gateways from this source tree (its src/)",
    )
    parser.add_argument("--throughput", type=int, default=0, metavar="S",
                        help="also measure requests/s with wrk for S seconds per run")  # fmt: skip
    args = parser.parse_args()
    if args.throughput and shutil.which("wrk") is None:
        parser.error("--throughput needs wrk (apt-get install wrk)")
    if args.baseline_src is not None:
        if args.in_process:
            parser.error("--baseline-src needs processes (one process imports one tree)")
        if not (args.baseline_src / "fleetgate" / "__init__.py").is_file():
            parser.error(f"--baseline-src {args.baseline_src}: no fleetgate package there")
    asyncio.run(main(args))
