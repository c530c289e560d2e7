"""The local launcher's crash gap: every launch is recorded before its process starts (port and a
token the process carries), and a launcher in another process (a restarted gateway) finds what
an interrupted start left: adopts a healthy engine, stops one that never gets healthy, starts
what is missing on the declared port. Real simulator processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleetgate.releases.launchers import Engines, LocalLauncher, serve_spec
from fleetgate.releases.launchers.processes import TOKEN_ENV, alive, launched
from tests.releases.test_launchers import answers, free_port, sim_version


def sim_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "fleetgate.cli.main", "sim", "--mode", "echo", "--model",
            "tiny", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip


def orphan(argv: list[str], token: str, log: Path) -> subprocess.Popen[bytes]:
    """A process started as the launcher starts engines (own session, the launch token) by
    someone else: what a gateway killed during a start leaves behind."""
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, TOKEN_ENV: token})  # fmt: skip


def interrupted(version: dict[str, Any], launches: list[dict[str, Any]]) -> Engines:
    """What a pipeline row holds after a start that was cut short: only pending launches."""
    spec = serve_spec(version)
    declared = [int(d["api_base"].rsplit(":", 1)[1].split("/")[0]) for d in
                version["deployments"] if "127.0.0.1" in d["api_base"]]  # fmt: skip
    return Engines("chat", version["version"], "eval", [], 0, {
        "spec": {"kind": spec.kind, "argv": spec.argv, "served_model": spec.served_model},
        "ports": [], "pids": [], "tokens": {}, "declared": declared, "pending": launches,
    })  # fmt: skip


def port_is_free(port: int) -> bool:
    """Nothing listens there (SO_REUSEADDR, as servers bind: TIME_WAIT may linger)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def reaped(proc: subprocess.Popen[bytes]) -> int | None:
    for _ in range(100):
        if proc.poll() is not None:
            return proc.returncode
        await asyncio.sleep(0.05)
    return proc.returncode


async def test_the_intent_is_recorded_before_the_process_starts(tmp_path: Path) -> None:
    port = free_port()
    seen: list[tuple[list[dict[str, Any]], bool]] = []

    async def record(engines: Engines) -> None:
        pending = engines.detail["pending"]
        running = bool(launched(pending[-1]["token"])) if pending else False
        seen.append(([dict(p) for p in pending], running))

    launcher = LocalLauncher(tmp_path, start_timeout_s=60)
    engines = await launcher.start(sim_version(1, port), role="eval", record=record)
    try:
        (first, running_then), (second, _) = seen
        assert first[0]["pid"] is None and first[0]["port"] == port and not running_then
        assert second[0]["pid"] == engines.detail["pids"][0]
        assert second[0]["token"] == engines.detail["tokens"][str(second[0]["pid"])]
        assert alive(second[0]["pid"], port, second[0]["token"])
        assert engines.detail["pending"] == [] and await launcher.healthy(engines)
    finally:
        await launcher.stop(engines)
    assert launched(second[0]["token"]) == [] and port_is_free(port)


async def test_resume_adopts_the_engine_an_interrupted_start_left(tmp_path: Path) -> None:
    port = free_port()
    version = sim_version(2, port)
    proc = orphan(sim_argv(port), "tok-adopt", tmp_path / "orphan.log")
    launcher = LocalLauncher(tmp_path, start_timeout_s=60)  # the restarted gateway's
    engines: Engines | None = None
    try:
        # what a killed gateway leaves is a process that has been running a while: seen by
        # its token before the restart looks (once, in a loaded CI run, a look made at once
        # found nothing and a second engine was started)
        for _ in range(100):
            if launched("tok-adopt") == [proc.pid]:
                break
            await asyncio.sleep(0.05)
        left = interrupted(version, [{"port": port, "token": "tok-adopt", "pid": None}])
        stored: list[Engines] = []

        async def record(engines: Engines) -> None:
            stored.append(engines)

        engines = await launcher.resume(version, left, replicas=1, record=record)
        # the same process, found by its token, on the declared port: nothing started
        assert engines.detail["pids"] == [proc.pid] and engines.urls[0].endswith(f":{port}/v1")
        assert stored[-1].detail["pending"] == [] and await answers(engines.urls[0])
        assert not (tmp_path / "chat-v2-eval-0.log").exists()
        await launcher.stop(engines)
        engines = None
        assert await reaped(proc) is not None and port_is_free(port)
    finally:
        if engines is not None:  # a failed assertion leaves no engine it started behind
            await launcher.stop(engines)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_resume_stops_a_stuck_launch_and_starts_again_on_the_port(tmp_path: Path) -> None:
    port = free_port()
    version = sim_version(3, port)
    # holds the token, never answers /health (a start that hung): stopped, the port reused
    stuck = orphan([sys.executable, "-c", "import time; time.sleep(60)"], "tok-stuck",
                   tmp_path / "stuck.log")  # fmt: skip
    try:
        left = interrupted(version, [{"port": port, "token": "tok-stuck", "pid": stuck.pid}])
        # waited for 1.5 s, then stopped (replicas=0: nothing started in its place yet)
        impatient = LocalLauncher(tmp_path, start_timeout_s=1.5, stop_timeout_s=3)
        adopted = await impatient.resume(version, left, replicas=0)
        assert adopted.replicas == 0 and await reaped(stuck) is not None
        launcher = LocalLauncher(tmp_path, start_timeout_s=60, stop_timeout_s=3)
        engines = await launcher.resume(version, adopted, replicas=1)
        try:
            assert engines.urls == [f"http://127.0.0.1:{port}/v1"]
            assert engines.detail["pids"] != [stuck.pid] and await answers(engines.urls[0])
        finally:
            await launcher.stop(engines)
    finally:
        if stuck.poll() is None:
            os.killpg(stuck.pid, signal.SIGKILL)
            stuck.wait()


async def test_resume_after_a_launch_that_never_started(tmp_path: Path) -> None:
    # recorded, then the gateway died before the process existed: started now; with no
    # declared port a free one is chosen, with one the declared port
    version = sim_version(4, None)
    left = interrupted(version, [{"port": free_port(), "token": "tok-never", "pid": None}])
    launcher = LocalLauncher(tmp_path, start_timeout_s=60)
    engines = await launcher.resume(version, left, replicas=1)
    try:
        assert engines.replicas == 1 and await answers(engines.urls[0])
    finally:
        await launcher.stop(engines)


async def test_stop_finds_a_pending_engine_by_its_token(tmp_path: Path) -> None:
    port = free_port()
    proc = orphan(sim_argv(port), "tok-stop", tmp_path / "orphan.log")
    try:
        left = interrupted(sim_version(5, port), [{"port": port, "token": "tok-stop",
                                                   "pid": None}])  # fmt: skip
        await LocalLauncher(tmp_path, stop_timeout_s=5).stop(left)
        assert await reaped(proc) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_a_scale_up_cut_short_is_adopted_by_the_next_scale(tmp_path: Path) -> None:
    # keep's scale-up records its launches too: the next scale adopts what the cut one left
    port = free_port()
    version = sim_version(6, None)
    proc = orphan(sim_argv(port), "tok-scale", tmp_path / "orphan.log")
    try:
        left = interrupted(version, [{"port": port, "token": "tok-scale", "pid": None}])
        stored: list[Engines] = []

        async def record(engines: Engines) -> None:
            stored.append(engines)

        launcher = LocalLauncher(tmp_path, start_timeout_s=60, stop_timeout_s=5)
        engines = await launcher.scale(left, 1, record=record)
        assert engines.detail["pids"] == [proc.pid] and engines.detail["pending"] == []
        assert stored and stored[0].detail["pending"] == []  # the adoption, recorded
        await launcher.stop(engines)
        assert await reaped(proc) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
