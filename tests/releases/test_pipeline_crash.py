"""The crash gap of the release pipeline: the gateway SIGKILLed while the temporary instance
starts (its engine process exists, not yet healthy). The restarted gateway finds the engine from
what the run recorded before starting it, adopts it (no second start on the busy port), and the
run completes once; afterwards no engine process of the run is left and the port is free."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.releases.launchers.processes import alive, launched
from tests.releases.pipeline_support import (
    AUTH,
    GatewayProcess,
    free_port,
    gateway_config,
    sim_version,
    step_seconds,
    write_suites,
)
from tests.releases.test_pipeline import _stop_all


def port_is_free(port: int) -> bool:
    """Nothing listens there: a server (which sets SO_REUSEADDR, as engines do) could bind it
    (connections of the stopped engine may linger in TIME_WAIT)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def started_not_healthy(gw: GatewayProcess, step: str, role: str) -> dict[str, Any]:
    """The pending launch of ``step``, as soon as its engine process exists (polled fast: the
    gap is the engine's start-up, a second or two)."""
    deadline = time.monotonic() + 120
    run: Any = None
    while time.monotonic() < deadline:
        status, run = await gw.admin("GET", "/admin/pipelines/chat/v1")
        if status == 200 and run["steps"] and run["steps"][-1]["name"] == step:
            assert run["steps"][-1]["status"] == "running", run["steps"]  # not missed
            pending = run["engines"].get(role, {}).get("detail", {}).get("pending", [])
            if pending and pending[0]["pid"]:
                return dict(pending[0])
        await asyncio.sleep(0.01)
    raise AssertionError(f"the engine never started: {run}")


async def test_gateway_killed_during_instance_up_adopts_the_engine(tmp_path: Path) -> None:
    golden, _ = write_suites(tmp_path, golden_items=24, max_tokens=32)
    gw = GatewayProcess(tmp_path, gateway_config(golden, None, release="gate", concurrency=4))
    port = free_port()
    await gw.start()
    launch: dict[str, Any] = {}
    try:
        await gw.admin("POST", "/admin/registry/models", {"name": "chat"})
        status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                      sim_version(1, port))  # fmt: skip
        assert status == 201, body
        launch = await started_not_healthy(gw, "instance_up", "eval")
        await gw.kill()
        killed_at = time.monotonic()
        # the engine outlives the gateway (its own session): the orphan the gap used to leave
        assert launch["port"] == port and alive(launch["pid"], port, launch["token"])
        await gw.start()
        run = await gw.wait_run("v1", ("passed", "failed", "stopped"))
        assert run["status"] == "passed", (run["reason"], run["steps"])
        names = [s["name"] for s in run["steps"]]
        assert names == ["instance_up", "suites", "gate", "instance_down"]  # each once
        up = run["steps"][0]
        assert len(up.get("resumed", [])) == 1  # taken over by the restarted gateway
        # the engine started before the kill was adopted: same process, same port
        assert up["detail"]["adopted"] == [launch["pid"]], up
        assert up["detail"]["urls"] == [f"http://127.0.0.1:{port}/v1"]
        rules = {r["metric"]: r for r in run["gate"]["rules"]}
        assert rules["golden"]["candidate"] == 1.0
        # instance_down stopped it: nothing of the run is left running, the port is free
        assert run["engines"] == {}
        for _ in range(100):
            if not launched(launch["token"]) and port_is_free(port):
                break
            await asyncio.sleep(0.05)
        assert launched(launch["token"]) == [] and not alive(launch["pid"], port, launch["token"])
        assert port_is_free(port)
        log = (tmp_path / "data" / "engines" / "chat-v1-eval-0.log").read_text()
        assert log.count("fleetgate sim: serving") == 1, log  # one engine started in all
        print(f"\nrestart to passed: {time.monotonic() - killed_at:.1f} s; "
              f"step seconds: {step_seconds(run)}")  # fmt: skip
    finally:
        await _stop_all(gw)
        for pid in launched(launch["token"]) if launch else []:
            os.killpg(pid, signal.SIGKILL)  # only if the test failed half way


async def test_gateway_killed_during_production_up_adopts_the_engine(tmp_path: Path) -> None:
    golden, _ = write_suites(tmp_path, golden_items=24, max_tokens=32)
    gw = GatewayProcess(tmp_path, gateway_config(golden, None, concurrency=4))  # rollout
    port = free_port()
    await gw.start()
    launch: dict[str, Any] = {}
    try:
        await gw.admin("POST", "/admin/registry/models", {"name": "chat"})
        status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                      sim_version(1, port))  # fmt: skip
        assert status == 201, body
        launch = await started_not_healthy(gw, "production_up", "production")
        await gw.kill()
        assert alive(launch["pid"], port, launch["token"])
        await gw.start()
        run = await gw.wait_run("v1", ("released", "failed", "stopped", "rolled_back"))
        assert run["status"] == "released", (run["reason"], run["steps"])
        names = [s["name"] for s in run["steps"]]
        assert names == ["instance_up", "suites", "gate", "instance_down", "production_up",
                         "rollout", "keep"]  # fmt: skip
        up = run["steps"][4]
        assert len(up.get("resumed", [])) == 1 and up["detail"]["adopted"] == [launch["pid"]]
        # production serves from the adopted engine: the one the run records, on the port
        production = run["engines"]["production"]["detail"]
        assert production["pids"] == [launch["pid"]] and production["ports"] == [port]
        assert production["pending"] == []
        assert launched(launch["token"]) == [launch["pid"]]  # one engine, no second
        async with aiohttp.ClientSession() as session:
            request = {"model": "chat", "messages": [{"role": "user", "content": "hi there"}]}
            async with session.post(gw.url + "/v1/chat/completions", json=request,
                                    headers=AUTH) as resp:  # fmt: skip
                assert resp.status == 200, await resp.text()
        log = (tmp_path / "data" / "engines" / "chat-v1-production-0.log").read_text()
        assert log.count("fleetgate sim: serving") == 1, log
        print(f"\nstep seconds: {step_seconds(run)}")
    finally:
        await _stop_all(gw)  # production engines outlive a gateway by design: stopped here
        for pid in launched(launch["token"]) if launch else []:
            os.killpg(pid, signal.SIGKILL)  # only if the test failed half way
    assert launched(launch["token"]) == []
