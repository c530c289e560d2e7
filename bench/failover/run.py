"""Region failover: two "regions" of simulators behind one gateway; region A's engines die.

    PYTHONPATH=src python bench/failover/run.py [--mode kill|freeze] [--runs 5] [--concurrency 12]

The gateway runs in region ``eu`` (``router.region``) with ``us`` as its failover region; each
region has two simulators (separate processes). Closed-loop streaming clients keep the gateway
busy; after ``--kill-at`` seconds region eu's simulators go down:

- ``--mode kill``: SIGKILLed (in-flight connections reset, new ones refused), a region whose
  machines are gone;
- ``--mode freeze``: SIGSTOPped (connections still accepted by the kernel, nothing answers), a
  region behind a black hole; detected only by timeouts, so the gateway runs with
  ``router.timeouts: {connect: 1, first_token: 3, idle: 3}`` (``health.allowed_fails``: the
  default 3 timeouts in a row before a deployment is cooled down).

Measured per run:

- failover time: from the kill until no eu deployment is left in rotation
  (``fleetgate_deployment_healthy`` of every eu deployment 0, polled every 50 ms): from then on
  every new request goes to region us first. Also printed: the last failure seen at an eu
  deployment (``fleetgate_retries_total``), which trails it by up to one first-token timeout
  for attempts sent just before;
- requests that failed before a first token reached the client (must be 0), and streams that
  had started in eu and were cut (allowed: nothing can resume them);
- TTFT p50 of the requests the failover caught (started between the kill and the failover, or
  in the second after the kill) against the steady TTFT before the kill, the baseline measured
  in the same run.

Prints the median of the runs and the per-run numbers; docs/results/benchmarks.md holds the results.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
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

    def freeze(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)


FREEZE_TIMEOUTS = {"connect": 1, "first_token": 3, "idle": 3}


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
    last_eu_failure_s: float
    unstarted_failed: int
    cut_streams: int
    requests: int
    ttft_before_ms: float
    ttft_caught_ms: float
    served_by_us_after: float


def _config(eu: list[str], us: list[str], mode: str) -> dict[str, Any]:
    deps = [
        {"model": "tiny", "api_base": f"{u}/v1", "name": f"{region}{i}", "region": region}
        for region, urls in (("eu", eu), ("us", us))
        for i, u in enumerate(urls)
    ]
    return {
        "models": [{"alias": "tiny", "deployments": deps}],
        "router": {
            "region": "eu",
            "region_failover": ["us"],
            **({"timeouts": FREEZE_TIMEOUTS} if mode == "freeze" else {}),
        },
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


def _eu_state(text: str) -> tuple[float, bool]:
    """(attempts retried after failing at a region-eu deployment, whether any eu deployment is
    in rotation), from the gateway's metrics (deployment ids ``eu0``, ``eu1``)."""
    retries, healthy = 0.0, False
    for line in text.splitlines():
        if 'deployment="eu' not in line:
            continue
        if line.startswith("fleetgate_retries_total{"):
            retries += float(line.rsplit(" ", 1)[1])
        elif line.startswith("fleetgate_deployment_healthy{"):
            healthy = healthy or float(line.rsplit(" ", 1)[1]) > 0
    return retries, healthy


@dataclass
class Watch:
    """What the metrics poller saw: when eu's retries rose, when no eu deployment was left."""

    retries_rose: list[float]
    all_eu_out: float | None = None


async def _watch(
    session: aiohttp.ClientSession, url: str, stop_at: float, killed: asyncio.Event, seen: Watch
) -> None:
    last = 0.0
    while time.monotonic() < stop_at:
        async with session.get(f"{url}/metrics") as resp:
            retries, healthy = _eu_state(await resp.text())
        now = time.monotonic()
        if retries > last:
            seen.retries_rose.append(now)
            last = retries
        if killed.is_set() and not healthy and seen.all_eu_out is None:
            seen.all_eu_out = now
        await asyncio.sleep(0.05)


def _p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


async def _load(
    url: str, kill: Any, concurrency: int, kill_at: float, duration: float
) -> RunResult:
    requests: list[Request] = []
    seen = Watch([])
    killed = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.monotonic()
        stop_at = t0 + duration
        tasks = [
            asyncio.create_task(_client(session, url, stop_at, requests))
            for _ in range(concurrency)
        ]
        watcher = asyncio.create_task(_watch(session, url, stop_at, killed, seen))
        await asyncio.sleep(kill_at)
        killed_at = time.monotonic()
        kill()
        killed.set()
        await asyncio.gather(*tasks)
        await watcher
    before = [r for r in requests if r.ended < killed_at and r.ok and r.first_token]
    out_at = seen.all_eu_out if seen.all_eu_out is not None else float("inf")
    last_failure = max((c for c in seen.retries_rose if c >= killed_at), default=killed_at)
    after = [r for r in requests if r.started > out_at]
    window_end = max(out_at, killed_at + 1.0) if out_at != float("inf") else killed_at + 1.0
    caught = [r for r in requests if killed_at <= r.started < window_end and r.first_token]
    unstarted_failed = sum(1 for r in requests if not r.ok and r.first_token is None)
    cut = sum(1 for r in requests if not r.ok and r.first_token is not None)
    return RunResult(
        failover_s=out_at - killed_at,
        last_eu_failure_s=last_failure - killed_at,
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


def one_run(mode: str, concurrency: int, kill_at: float, duration: float) -> RunResult:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        path = Path(tmp)
        eu = Region(2, FLAGS, stack)
        us = Region(2, FLAGS, stack)
        stack.callback(eu.thaw)  # a stopped process must run again to be stopped
        config = _config(eu.urls, us.urls, mode)
        url = stack.enter_context(gateway_process(config, path, MASTER))
        down = eu.kill if mode == "kill" else eu.freeze
        return asyncio.run(_load(url, down, concurrency, kill_at, duration))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["kill", "freeze"], default="kill")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--kill-at", type=float, default=3.0)
    parser.add_argument("--duration", type=float, help="seconds of load (kill: 8, freeze: 20)")
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 8.0 if args.mode == "kill" else 20.0
    results = [
        one_run(args.mode, args.concurrency, args.kill_at, args.duration) for _ in range(args.runs)
    ]
    print(f"mode: {args.mode}, {args.runs} runs, {args.concurrency} concurrent streams")
    print("run  failover_s  last_eu_failure_s  unstarted_failed  cut_streams  requests  "
          "ttft_before_ms  ttft_caught_ms  us_share_after")  # fmt: skip
    for i, r in enumerate(results, 1):
        print(f"{i:3d}  {r.failover_s:10.3f}  {r.last_eu_failure_s:17.3f}  "
              f"{r.unstarted_failed:16d}  {r.cut_streams:11d}  {r.requests:8d}  "
              f"{r.ttft_before_ms:14.1f}  {r.ttft_caught_ms:14.1f}  "
              f"{r.served_by_us_after:14.2f}")  # fmt: skip
    med = statistics.median
    failover = med(r.failover_s for r in results)
    ratio = med(r.ttft_caught_ms / r.ttft_before_ms for r in results)
    print(f"median failover time: {failover:.3f} s (target < 10 s); median last eu failure: "
          f"{med(r.last_eu_failure_s for r in results):.3f} s")  # fmt: skip
    print(f"requests failed before their first token: {sum(r.unstarted_failed for r in results)} "
          f"in {sum(r.requests for r in results)} (target 0)")  # fmt: skip
    print(f"streams cut mid-way: {sum(r.cut_streams for r in results)}")
    print(f"TTFT of requests caught by the failover / steady TTFT before it: {ratio:.2f}x")


if __name__ == "__main__":
    main()
