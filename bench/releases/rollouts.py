"""Real progressive rollouts, many in a row: ``--identical`` rollouts of a candidate identical to
production (another simulator process with the same flags) and ``--failing`` rollouts of one
whose simulator fails ``--error-rate`` (10%) of its requests with a 500, each through the
gateway's own rollout path (``POST /admin/registry/rollouts``: the picker splits live traffic,
every replica counts outcomes, the driver judges each step with the configured gate and rolls
back or promotes). Only the rollout's pace is shortened, through config: steps 50 -> 100,
``--interval`` seconds a step, ``--min-samples`` requests a side; the gate's thresholds are the
defaults (error rate +2 points, latency/TTFT/TPOT p95 x1.5 with their floors, significance 0.05).

Clients send to the alias throughout (``--clients`` in parallel, each request a distinct
prompt, every other one streamed so that TTFT and TPOT are judged too). Per rollout it prints
the verdict (``completed``, ``rolled_back``, ``paused`` after too many inconclusive judgements,
or ``timeout``), each decision's verdict, its reason, its seconds, the requests sent, the
candidate's failed attempts, the client errors, and for each client error whether the alias
then had another deployment to retry on: a rollout was running (both versions served; a
failed attempt on the candidate is retried on the baseline), judged from the rollout's status
polled every 50 ms around the request.

    .venv/bin/python bench/releases/rollouts.py --identical 20 --failing 20
    .venv/bin/python bench/releases/rollouts.py --identical 3 --failing 3 --json out.json

Every loop is bounded: each rollout by ``--rollout-timeout`` (then aborted), the whole run by
``--deadline``. Processes bind 127.0.0.1 and are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from fleetgate.cli.processes import free_port, stop, wait_http

MASTER = "sk-bench-rollouts"
AUTH = {"Authorization": f"Bearer {MASTER}"}


@contextmanager
def sim(*flags: str) -> Iterator[str]:
    """``fleetgate sim`` on a free port; its base URL (with /v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--host", "127.0.0.1",
           "--port", str(port), "--model", "tiny", "--mode", "echo", *flags]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=60.0)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)


@contextmanager
def gateway(root: Path, config: dict[str, Any], env: dict[str, str]) -> Iterator[str]:
    """``fleetgate serve`` on a free port; its base URL."""
    port = free_port()
    (root / "gateway.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config",
           str(root / "gateway.yaml"), "--port", str(port), "--data-dir", str(root / "data"),
           "--no-watch"]  # fmt: skip
    log = (root / f"gateway-{port}.log").open("wb")
    full_env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER, **env}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/live", proc, timeout=90.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()


@dataclass
class Answer:
    sent: float
    done: float
    status: int
    deployment: str
    error: str = ""


@dataclass
class Result:
    n: int
    kind: str
    candidate: str
    baseline: str
    verdict: str
    reason: str
    seconds: float
    requests: int
    to_candidate: int
    trail: str  # each decision's verdict, in order (extend, pass, inconclusive, fail)
    candidate_failed_attempts: int  # in the last judged window: what the retries hid
    candidate_attempts: int
    client_errors: int
    errors_with_retry_target: int
    errors_without: int
    errors: list[dict[str, Any]] = field(default_factory=list)


class Traffic:
    """``clients`` loops sending distinct prompts to ``chat`` on the replicas, round robin."""

    def __init__(
        self, s: aiohttp.ClientSession, replicas: list[str], clients: int, stream: bool
    ) -> None:
        self.s, self.replicas, self.clients, self.stream = s, replicas, clients, stream
        self.answers: list[Answer] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._count = 0

    async def _client(self, n: int) -> None:
        while not self._stop.is_set():
            self._count += 1
            url = self.replicas[self._count % len(self.replicas)] + "/v1/chat/completions"
            prompt = f"request {n}-{self._count}"
            body: dict[str, Any] = {"model": "chat", "max_tokens": 4,
                                    "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
            if self._count % 2 == 0 and self.stream:  # TTFT and TPOT are judged on streams
                body["stream"] = True
            sent = time.monotonic()
            try:
                async with self.s.post(url, json=body, headers=AUTH) as resp:
                    raw = await resp.read()
                    dep = resp.headers.get("x-fleetgate-deployment", "")
                    error = "" if resp.status == 200 else raw.decode(errors="replace")[:300]
                    self.answers.append(Answer(sent, time.monotonic(), resp.status, dep, error))
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.answers.append(Answer(sent, time.monotonic(), 0, "", repr(exc)))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client(n)) for n in range(self.clients)]

    async def aclose(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def admin(s: aiohttp.ClientSession, base: str, method: str, path: str,
                body: Any = None) -> tuple[int, Any]:  # fmt: skip
    async with s.request(method, base + path, json=body, headers=AUTH) as resp:
        return resp.status, await resp.json(content_type=None)


class Bench:
    def __init__(self, s: aiohttp.ClientSession, replicas: list[str], args: argparse.Namespace,
                 engines: dict[str, str]) -> None:  # fmt: skip
        self.s, self.replicas, self.args, self.engines = s, replicas, args, engines
        self.base = replicas[0]
        self.versions = 0
        self.engine_of: dict[str, str] = {}  # version -> the engine (a, b, f) it runs on
        # (time, rollout status) as polled: whether the alias served two versions then
        self.timeline: list[tuple[float, str]] = []

    async def register(self, engine: str) -> str:
        self.versions += 1
        name = f"v{self.versions}"
        self.engine_of[name] = engine
        body = {"version": name, "artifact_uri": f"s3://chat/{self.versions}",
                "deployments": [{"model": "tiny", "api_base": self.engines[engine],
                                 "name": f"chat-{name}-{engine}"}]}  # fmt: skip
        status, got = await admin(self.s, self.base, "POST", "/admin/registry/models/chat/versions",
                                  body)  # fmt: skip
        assert status == 201, got
        return name

    async def production(self) -> str:
        _, model = await admin(self.s, self.base, "GET", "/admin/registry/models/chat")
        return str(model["stages"]["production"])

    async def wait_serving(self, version: str, traffic: Traffic, timeout_s: float = 10.0) -> None:
        """Until the last answers of every replica come from ``version`` alone."""
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            await asyncio.sleep(0.1)
            recent = [a for a in traffic.answers if a.sent > began + 0.5]
            if len(recent) >= 10 and all(f"chat-{version}-" in a.deployment for a in recent[-10:]):
                return
        raise AssertionError(f"{version} does not serve alone after {timeout_s} s")

    async def rollout(self, n: int, kind: str, traffic: Traffic) -> Result:
        args = self.args
        baseline = await self.production()
        # identical: the other of the two identical engines; failing: the failing one
        engine = ("b" if self.engine_of[baseline] == "a" else "a") if kind == "identical" else "f"
        candidate = await self.register(engine)
        start = {"alias": "chat", "to": candidate, "steps": [50, 100],
                 "interval_s": args.interval, "min_samples": args.min_samples,
                 "force": True}  # fmt: skip
        first = len(traffic.answers)
        began = time.monotonic()
        status, got = await admin(self.s, self.base, "POST", "/admin/registry/rollouts", start)
        assert status == 201, got
        self.timeline.append((began, "running"))
        body: Any = got
        while time.monotonic() - began < args.rollout_timeout:
            await asyncio.sleep(0.05)
            _, body = await admin(self.s, self.base, "GET", "/admin/registry/rollouts/chat")
            self.timeline.append((time.monotonic(), body["status"]))
            if body["status"] not in ("running",):
                break
        verdict = body["status"] if body["status"] != "running" else "timeout"
        seconds = time.monotonic() - began
        if verdict in ("timeout", "paused"):
            await admin(self.s, self.base, "POST", "/admin/registry/rollouts/chat/abort", {})
            self.timeline.append((time.monotonic(), "aborted"))
        # the alias back on one version everywhere before the next rollout (and its answers
        # counted with this one)
        serving = candidate if verdict == "completed" else baseline
        await self.wait_serving(serving, traffic)
        answers = traffic.answers[first:]
        errors = [a for a in answers if a.status != 200]
        detail = [{"after_s": round(a.sent - began, 3), "status": a.status,
                   "retry_target": self.two_versions(a), "error": a.error[:160]}
                  for a in errors]  # fmt: skip
        with_target = sum(1 for e in detail if e["retry_target"])
        decisions = body.get("decisions") or [{}]
        last = decisions[-1].get("candidate") or {}
        reason = body.get("reason") or decisions[-1].get("reason") or ""
        return Result(
            n, kind, candidate, baseline, verdict, str(reason)[:300], round(seconds, 2),
            len(answers), sum(1 for a in answers if f"chat-{candidate}-" in a.deployment),
            ",".join(str(d.get("verdict")) for d in decisions),
            int(last.get("failed_attempts", 0)), int(last.get("attempts", 0)), len(errors),
            with_target, len(errors) - with_target, detail,
        )  # fmt: skip

    def two_versions(self, answer: Answer) -> bool:
        """Whether a rollout was running (as polled) from just before the request was sent to
        just after it ended: the alias had the baseline to retry a candidate's failure on."""
        before = [st for t, st in self.timeline if t <= answer.sent]
        after = [st for t, st in self.timeline if t >= answer.done]
        during = [st for t, st in self.timeline if answer.sent < t < answer.done]
        return (
            bool(before and after)
            and before[-1] == "running"
            and after[0] == "running"
            and (all(st == "running" for st in during))
        )


async def run(args: argparse.Namespace) -> list[Result]:
    deadline = time.monotonic() + args.deadline
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fg-rollouts-")))
        engines = {"a": stack.enter_context(sim()), "b": stack.enter_context(sim()),
                   "f": stack.enter_context(sim("--error-rate", str(args.error_rate)))}  # fmt: skip
        config = {
            "models": [{"alias": "chat", "registry": {"model": "chat", "stage": "production"}}],
            "tenancy": {"enabled": False},
            "releases": {"poll_interval_s": 0.2,
                         "rollout": {"tick_s": 0.2, "lease_s": 2.0, "flush_s": 0.2}},
        }  # fmt: skip
        env = {"FLEETGATE_DATABASE_URL": args.database_url} if args.database_url else {}
        replicas = []
        for i in range(args.replicas):
            sub = root / f"replica-{i}"
            sub.mkdir()
            replicas.append(stack.enter_context(gateway(sub, config, env)))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            bench = Bench(s, replicas, args, engines)
            assert (await admin(s, bench.base, "POST", "/admin/registry/models",
                                {"name": "chat"}))[0] == 201  # fmt: skip
            first = await bench.register("a")
            promote = {"stage": "production", "version": first, "force": True}
            status, got = await admin(
                s, bench.base, "POST", "/admin/registry/models/chat/promote", promote
            )
            assert status == 200, got
            traffic = Traffic(s, replicas, args.clients, not args.no_stream)
            traffic.start()
            results: list[Result] = []
            try:
                await bench.wait_serving(first, traffic, timeout_s=20.0)
                plan = ["identical"] * args.identical + ["failing"] * args.failing
                for n, kind in enumerate(plan, start=1):
                    if time.monotonic() > deadline:
                        print(f"deadline reached after {n - 1} rollouts", flush=True)
                        break
                    result = await bench.rollout(n, kind, traffic)
                    results.append(result)
                    print(_line(result), flush=True)
                    for e in result.errors:
                        print(f"      client error {e}", flush=True)
            finally:
                await traffic.aclose()
            return results


def _line(r: Result) -> str:
    why = r.reason[:110]
    return (f"{r.n:3d} {r.kind:9s} {r.baseline}->{r.candidate:4s} {r.verdict:11s} "
            f"{r.seconds:5.1f}s [{r.trail}] requests {r.requests:5d} (candidate "
            f"{r.to_candidate:4d}, failed attempts {r.candidate_failed_attempts}/"
            f"{r.candidate_attempts}) "
            f"client errors {r.client_errors} (another deployment to retry on: "
            f"{r.errors_with_retry_target}, none: {r.errors_without})  {why}")  # fmt: skip


def summary(results: list[Result]) -> str:
    lines = []
    for kind, want in (("identical", "completed"), ("failing", "rolled_back")):
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        verdicts: dict[str, int] = {}
        for r in rs:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
        secs = sorted(r.seconds for r in rs)
        lines.append(
            f"{kind}: {len(rs)} rollouts, {verdicts.get(want, 0)} {want}; verdicts {verdicts}; "
            f"seconds median {secs[len(secs) // 2]:.1f} max {secs[-1]:.1f}; requests "
            f"{sum(r.requests for r in rs)}, client errors {sum(r.client_errors for r in rs)} "
            f"(with another deployment {sum(r.errors_with_retry_target for r in rs)}, without "
            f"{sum(r.errors_without for r in rs)})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--identical", type=int, default=20)
    parser.add_argument("--failing", type=int, default=20)
    parser.add_argument("--error-rate", type=float, default=0.1)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds a step is observed")
    parser.add_argument("--min-samples", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--no-stream", action="store_true",
                        help="JSON answers only (else every other request streams)")  # fmt: skip
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--database-url", default=None, help="PostgreSQL for several replicas")
    parser.add_argument("--rollout-timeout", type=float, default=60.0)
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    args = parser.parse_args()
    load = os.getloadavg()
    began = time.monotonic()
    results = asyncio.run(run(args))
    took = time.monotonic() - began
    print(summary(results))
    print(f"{len(results)} rollouts in {took:.0f} s; load average before "
          f"{load[0]:.1f}, after {os.getloadavg()[0]:.1f} (1 min)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
