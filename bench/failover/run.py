"""Region failover: two "regions" of simulators behind one gateway; region A's engines die.

    PYTHONPATH=src python bench/failover/run.py [--runs 5] [--concurrency 12]

The gateway runs in region ``eu`` (``router.region``) with ``us`` as its failover region; each
region has two simulators (separate processes). Closed-loop streaming clients keep the gateway
busy; after ``--kill-at`` seconds region eu's simulators are SIGKILLed (in-flight connections
reset, new ones refused). Measured per run:

- failover time: from the kill to the last attempt the gateway sent to region eu (the last
  increase of ``fleetgate_retries_total`` for an eu deployment, polled every 50 ms): after it,
  every new request goes to region us first;
- requests that failed before a first token reached the client (must be 0), and streams that
  had started in eu and were cut (allowed: nothing can resume them);
- TTFT p50 of the requests the failover caught (started in the second after the kill) against
  the steady TTFT before the kill, the baseline measured in the same run.

Prints the median of the runs and the per-run numbers; docs/benchmarks.md holds the results.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ as a package root

from fleetgate.cli.processes import free_port, stop, wait_http  # noqa: E402
from routing.fleet import SimFlags, _env, gateway_process  # noqa: E402

MASTER = "sk-bench-failover"
FLAGS = SimFlags(decode_ms_per_step=6.0, output_len=24, prefill_ms_per_token=0.05)


class Region:
    """Simulator processes of one region; `kill` SIGKILLs them all (a region going down)."""

    def __init__(self, n: int, flags: SimFlags, stack: ExitStack) -> None:
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(n):
            port = free_port()
            cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port),
                   *flags.args(), "--seed", str(flags.seed + i)]  # fmt: skip
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=_env())  # fmt: skip
            stack.callback(stop, proc)
            self.procs.append(proc)
            self.urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(self.urls, self.procs, strict=True):
            wait_http(f"{url}/health", proc, timeout=60)

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()


@dataclass
class Request:
    started: float
    first_token: float | None = None
    ended: float = 0.0
    ok: bool = False
    deployment: str = ""


@dataclass
class RunResult:
    failover_s: float
    unstarted_failed: int
    cut_streams: int
    requests: int
    ttft_before_ms: float
    ttft_caught_ms: float
    served_by_us_after: float


def _config(eu: list[str], us: list[str]) -> dict[str, Any]:
    deps = [
        {"model": "tiny", "api_base": f"{u}/v1", "name": f"{region}{i}", "region": region}
        for region, urls in (("eu", eu), ("us", us))
        for i, u in enumerate(urls)
    ]
    return {
        "models": [{"alias": "tiny", "deployments": deps}],
        "router": {"region": "eu", "region_failover": ["us"]},
        "health": {"probe_interval_s": 0.5},
        "tenancy": {"enabled": False},
    }


async def _client(
    session: aiohttp.ClientSession, url: str, stop_at: float, out: list[Request]
) -> None:
    body = {"model": "tiny", "stream": True, "max_tokens": 24,
            "messages": [{"role": "user", "content": "tell me about regions " * 8}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {MASTER}"}
    while time.monotonic() < stop_at:
        req = Request(time.monotonic())
        out.append(req)
        try:
            async with session.post(f"{url}/v1/chat/completions", json=body,
                                    headers=headers) as resp:  # fmt: skip
                req.deployment = resp.headers.get("x-fleetgate-deployment", "")
                if resp.status != 200:
                    await resp.read()
                    continue
                done = False
                async for line in resp.content:
                    if req.first_token is None and line.startswith(b"data: {"):
                        req.first_token = time.monotonic()
                    if b'"error"' in line:
                        break
                    if line.startswith(b"data: [DONE]"):
                        done = True
                req.ok = done
        except (aiohttp.ClientError, TimeoutError):
            pass
        finally:
            req.ended = time.monotonic()


def _eu_retries(text: str) -> float:
    """Attempts retried after failing at a region-eu deployment (ids ``eu0``, ``eu1``)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("fleetgate_retries_total{") and 'deployment="eu' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _watch_retries(
    session: aiohttp.ClientSession, url: str, stop_at: float, changes: list[float]
) -> None:
    last = 0.0
    while time.monotonic() < stop_at:
        async with session.get(f"{url}/metrics") as resp:
            value = _eu_retries(await resp.text())
        if value > last:
            changes.append(time.monotonic())
            last = value
        await asyncio.sleep(0.05)


def _p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


async def _load(
    url: str, kill: Any, concurrency: int, kill_at: float, duration: float
) -> RunResult:
    requests: list[Request] = []
    changes: list[float] = []
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.monotonic()
        stop_at = t0 + duration
        tasks = [
            asyncio.create_task(_client(session, url, stop_at, requests))
            for _ in range(concurrency)
        ]
        watcher = asyncio.create_task(_watch_retries(session, url, stop_at + 1.0, changes))
        await asyncio.sleep(kill_at)
        killed_at = time.monotonic()
        kill()
        await asyncio.gather(*tasks)
        await watcher
    before = [r for r in requests if r.ended < killed_at and r.ok and r.first_token]
    caught = [r for r in requests if killed_at <= r.started < killed_at + 1.0 and r.first_token]
    last_eu = max((c for c in changes if c >= killed_at), default=killed_at)
    after = [r for r in requests if r.started > last_eu]
    unstarted_failed = sum(1 for r in requests if not r.ok and r.first_token is None)
    cut = sum(1 for r in requests if not r.ok and r.first_token is not None)
    return RunResult(
        failover_s=last_eu - killed_at,
        unstarted_failed=unstarted_failed,
        cut_streams=cut,
        requests=len(requests),
        ttft_before_ms=_p50_ms([r.first_token - r.started for r in before if r.first_token]),
        ttft_caught_ms=_p50_ms([r.first_token - r.started for r in caught if r.first_token]),
        served_by_us_after=(
            sum(1 for r in after if r.deployment.endswith(("us0", "us1"))) / len(after)
            if after
            else float("nan")
        ),
    )


def one_run(concurrency: int, kill_at: float, duration: float) -> RunResult:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        path = Path(tmp)
        eu = Region(2, FLAGS, stack)
        us = Region(2, FLAGS, stack)
        url = stack.enter_context(gateway_process(_config(eu.urls, us.urls), path, MASTER))
        return asyncio.run(_load(url, eu.kill, concurrency, kill_at, duration))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--kill-at", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=8.0)
    args = parser.parse_args()
    results = [one_run(args.concurrency, args.kill_at, args.duration) for _ in range(args.runs)]
    print("run  failover_s  unstarted_failed  cut_streams  requests  ttft_before_ms  "
          "ttft_caught_ms  us_share_after")  # fmt: skip
    for i, r in enumerate(results, 1):
        print(f"{i:3d}  {r.failover_s:10.3f}  {r.unstarted_failed:16d}  {r.cut_streams:11d}  "
              f"{r.requests:8d}  {r.ttft_before_ms:14.1f}  {r.ttft_caught_ms:14.1f}  "
              f"{r.served_by_us_after:14.2f}")  # fmt: skip
    med = statistics.median
    failover = med(r.failover_s for r in results)
    ratio = med(r.ttft_caught_ms / r.ttft_before_ms for r in results)
    print(f"median failover time: {failover:.3f} s (target < 10 s)")
    print(f"requests failed before their first token: {sum(r.unstarted_failed for r in results)} "
          f"in {sum(r.requests for r in results)} (target 0)")  # fmt: skip
    print(f"streams cut mid-way by the kill: {sum(r.cut_streams for r in results)}")
    print(f"TTFT of requests caught by the failover / steady TTFT before it: {ratio:.2f}x")


if __name__ == "__main__":
    main()
