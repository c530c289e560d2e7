"""The release pipeline's end-to-end tests: a gateway as a real process (so it can be
SIGKILLed), versions whose serve command is the simulator, suites written to files."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from fleetgate.sim.generation import WORDS
from tests.procs import free_port

MASTER = "sk-master-pipeline"
AUTH = {"Authorization": f"Bearer {MASTER}"}
PROMPTS = [f"Item {i:03d}: the answer to question {i} is {i * 7 % 101}." for i in range(1, 241)]
LONG = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(2100)) for i in range(3)]


def write_suites(root: Path, golden_items: int = 240, max_tokens: int = 64) -> tuple[Path, Path]:
    golden, long = root / "golden.jsonl", root / "long.jsonl"
    golden.write_text("".join(
        json.dumps({"id": f"g-{i:03d}", "prompt": p, "expected": p, "max_tokens": max_tokens})
        + "\n" for i, p in enumerate(PROMPTS[:golden_items], start=1)
    ))  # fmt: skip
    long.write_text("".join(
        json.dumps({"id": f"long-{i}", "prompt": p, "expected": p, "max_tokens": 2200}) + "\n"
        for i, p in enumerate(LONG)
    ))  # fmt: skip
    return golden, long


def gateway_config(golden: Path, long: Path | None, **pipeline: Any) -> dict[str, Any]:
    model = {"alias": "chat", "suites": [str(golden)],
             "drift_suites": [str(long)] if long else [], "release": "rollout",
             "steps": [50, 100], "interval_s": 1.0, "min_samples": 5, "concurrency": 16,
             **pipeline}  # fmt: skip
    rules: list[dict[str, Any]] = [{"metric": "golden", "min": 0.95}]
    if long is not None:
        rules.append({"metric": "drift_agreement", "min": 0.98})
    return {
        "models": [{"alias": "chat", "registry": {"model": "chat", "stage": "production"}}],
        "health": {"probe_interval_s": 30},
        "releases": {
            "poll_interval_s": 0.2,
            "rollout": {"tick_s": 0.2, "lease_s": 2.0, "flush_s": 0.2},
            "gates": {"chat": {"rules": rules}},
        },  # fmt: skip
        "pipelines": {
            "tick_s": 0.2,
            "lease_s": 2.0,
            "start_timeout_s": 90,
            "models": {"chat": model},
        },  # fmt: skip
    }


def sim_version(n: int, port: int, *flags: str) -> dict[str, Any]:
    """A version whose engine is ``fleetgate sim --mode echo FLAGS`` on 127.0.0.1:``port``."""
    return {
        "version": f"v{n}", "artifact_uri": f"s3://models/chat/{n}", "tokenizer": "tiny",
        "max_model_len": 32768,
        "card": {"serve": ["fleetgate", "sim", "--mode", "echo", *flags]},
        "deployments": [{"model": "tiny", "api_base": f"http://127.0.0.1:{port}/v1",
                         "name": f"chat-v{n}"}],
    }  # fmt: skip


class GatewayProcess:
    """``fleetgate serve`` on a free port with the config and data directory given."""

    def __init__(
        self, root: Path, config: dict[str, Any], env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (root / "gateway.yaml").write_text(yaml.safe_dump(config))
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        log = (self.root / f"gateway-{self.starts}.log").open("ab")
        env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER, **self.env}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleetgate.cli.main", "serve", "--config",
            str(self.root / "gateway.yaml"), "--port", str(self.port), "--data-dir",
            str(self.root / "data"), "--no-watch", stdout=log, stderr=log, env=env,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(self.url + "/v1/models", headers=AUTH) as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                assert self.proc.returncode is None, (self.root / "gateway-1.log").read_text()
                await asyncio.sleep(0.2)
        raise AssertionError("the gateway did not start")

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    async def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.request(method, self.url + path, json=body,
                                       headers=AUTH) as resp:  # fmt: skip
                return resp.status, await resp.json(content_type=None)

    async def wait_run(self, version: str, done: tuple[str, ...], timeout_s: float = 180) -> Any:
        """The pipeline run of ``version`` once its status is one of ``done``."""
        deadline = time.monotonic() + timeout_s
        body: Any = None
        while time.monotonic() < deadline:
            status, body = await self.admin("GET", f"/admin/pipelines/chat/{version}")
            if status == 200 and body["status"] in done:
                return body
            await asyncio.sleep(0.3)
        raise AssertionError(f"pipeline of {version} did not finish: {body}")


class Traffic:
    """Requests to ``chat`` in the background (a rollout judges real traffic), one at a time,
    ``pause_s`` apart, until the context ends or ``max_requests`` were sent or ``max_s`` passed
    (when given); records which deployment answered each, with the time."""

    def __init__(
        self,
        url: str,
        pause_s: float = 0.02,
        max_requests: int | None = None,
        max_s: float | None = None,
    ) -> None:
        self.url = url
        self.pause_s = pause_s
        self.max_requests = max_requests
        self.max_s = max_s
        self.seen: list[tuple[float, int, str]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Traffic:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": 8}  # fmt: skip
        began = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while self.max_requests is None or len(self.seen) < self.max_requests:
                if self.max_s is not None and time.monotonic() - began > self.max_s:
                    return
                try:
                    async with session.post(self.url + "/v1/chat/completions", json=body,
                                            headers=AUTH) as resp:  # fmt: skip
                        await resp.read()
                        deployment = resp.headers.get("x-fleetgate-deployment", "")
                        self.seen.append((time.monotonic(), resp.status, deployment))
                except aiohttp.ClientError:
                    self.seen.append((time.monotonic(), 0, ""))
                await asyncio.sleep(self.pause_s)


def step_seconds(run: dict[str, Any]) -> dict[str, float]:
    return {s["name"]: round((s["finished_ms"] - s["started_ms"]) / 1000, 2)
            for s in run["steps"] if s.get("finished_ms")}  # fmt: skip
