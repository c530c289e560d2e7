"""`LocalLauncher`: a version's engines as processes on this machine.

Each engine runs the version's serve command (`fleetgate.releases.launchers.base.serve_spec`)
on 127.0.0.1: on the port of the version's deployment when its ``api_base`` is a loopback
address with a port (so the gateway's ``alias@version`` reaches it), else on a free port. Its
output goes to ``<log_dir>/<model>-<version>-<role>-<n>.log``. ``start`` waits at most
``start_timeout_s`` for ``GET /health``; an engine that exits or does not answer in time is
killed and the start fails. ``stop`` sends SIGTERM, then SIGKILL after ``stop_timeout_s``.

The processes are found again by their pid and port (``Engines.detail``), so a gateway
restarted while its pipeline had engines up can check and stop them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from fleetgate.errors import UpstreamConnectError
from fleetgate.releases.launchers.base import Engines, ServeSpec, serve_spec

__all__ = ["LocalLauncher"]

_HOST = "127.0.0.1"
_LOOPBACK = {"127.0.0.1", "localhost"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return int(s.getsockname()[1])


def _declared_ports(version: Mapping[str, Any]) -> list[int]:
    """Ports of the version's deployments that are loopback addresses with a port."""
    ports = []
    for dep in version.get("deployments") or []:
        parts = urlsplit(str(dep.get("api_base") or ""))
        if parts.hostname in _LOOPBACK and parts.port:
            ports.append(parts.port)
    return ports


def _argv(spec: ServeSpec, port: int) -> list[str]:
    argv = spec.with_address(_HOST, port)
    if argv[0] == "fleetgate":  # this installation's fleetgate, whatever PATH says
        return [sys.executable, "-m", "fleetgate.cli.main", *argv[1:]]
    return argv


def _alive(pid: int, port: int) -> bool:
    """Whether ``pid`` is still the engine started on ``port`` (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(port).encode() in cmdline


class LocalLauncher:
    def __init__(
        self,
        log_dir: Path,
        *,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 10.0,
        poll_s: float = 0.2,
    ) -> None:
        self.log_dir = log_dir
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.poll_s = poll_s
        self._procs: dict[int, asyncio.subprocess.Process] = {}

    async def start(self, version: Mapping[str, Any], *, role: str, replicas: int = 1) -> Engines:
        spec = serve_spec(version)
        declared = _declared_ports(version)
        engines = Engines(str(version["model"]), str(version["version"]), role, [], 0,
                          {"spec": {"kind": spec.kind, "argv": spec.argv,
                                    "served_model": spec.served_model},
                           "ports": [], "pids": [], "declared": declared})  # fmt: skip
        return await self._grow(engines, spec, replicas)

    async def _grow(self, engines: Engines, spec: ServeSpec, replicas: int) -> Engines:
        ports, pids = list(engines.detail["ports"]), list(engines.detail["pids"])
        declared = [p for p in engines.detail.get("declared", []) if p not in ports]
        started: list[tuple[int, int]] = []
        try:
            for n in range(len(ports), replicas):
                port = declared.pop(0) if declared else _free_port()
                pid = await self._spawn(engines, spec, port, n)
                started.append((pid, port))
            await asyncio.gather(*(self._wait_healthy(pid, port) for pid, port in started))
        except BaseException:
            await asyncio.gather(*(self._kill(pid, port) for pid, port in started))
            raise
        ports += [p for _, p in started]
        pids += [p for p, _ in started]
        return Engines(engines.model, engines.version, engines.role,
                       [f"http://{_HOST}:{p}/v1" for p in ports], len(ports),
                       {**engines.detail, "ports": ports, "pids": pids})  # fmt: skip

    async def _spawn(self, engines: Engines, spec: ServeSpec, port: int, n: int) -> int:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{engines.model}-{engines.version}-{engines.role}-{n}.log"
        with log.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *_argv(spec, port), stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self._procs[proc.pid] = proc
        return proc.pid

    async def _wait_healthy(self, pid: int, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        url = f"http://{_HOST}:{port}/health"
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                proc = self._procs.get(pid)
                if proc is not None and proc.returncode is not None:
                    raise UpstreamConnectError(
                        f"the engine on port {port} exited with status {proc.returncode} "
                        "before it was healthy (see its log)"
                    )
                if await _answers(session, url):
                    return
                await asyncio.sleep(self.poll_s)
        raise UpstreamConnectError(
            f"the engine on port {port} was not healthy within {self.start_timeout_s:g} s"
        )

    async def healthy(self, engines: Engines) -> bool:
        ports: list[int] = engines.detail.get("ports", [])
        if not ports:
            return False
        async with aiohttp.ClientSession() as session:
            answers = await asyncio.gather(
                *(_answers(session, f"http://{_HOST}:{p}/health") for p in ports)
            )
        return all(answers)

    async def scale(self, engines: Engines, replicas: int) -> Engines:
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        ports, pids = list(engines.detail["ports"]), list(engines.detail["pids"])
        if replicas >= len(ports):
            spec = ServeSpec(**engines.detail["spec"])
            return await self._grow(engines, spec, replicas)
        await asyncio.gather(*(self._kill(pid, port) for pid, port in
                               zip(pids[replicas:], ports[replicas:], strict=True)))  # fmt: skip
        ports, pids = ports[:replicas], pids[:replicas]
        return Engines(engines.model, engines.version, engines.role,
                       [f"http://{_HOST}:{p}/v1" for p in ports], replicas,
                       {**engines.detail, "ports": ports, "pids": pids})  # fmt: skip

    async def stop(self, engines: Engines) -> None:
        pids: list[int] = engines.detail.get("pids", [])
        ports: list[int] = engines.detail.get("ports", [])
        await asyncio.gather(*(self._kill(p, q) for p, q in zip(pids, ports, strict=True)))

    async def _kill(self, pid: int, port: int) -> None:
        proc = self._procs.pop(pid, None)
        if proc is None and not _alive(pid, port):
            return  # gone already (or the pid now belongs to something else)
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.returncode is not None:
                return
            if proc is None and not _alive(pid, port):
                return
            await asyncio.sleep(0.05)
        _signal(pid, signal.SIGKILL)
        if proc is not None:
            await proc.wait()


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # its own session: the engine and any workers it started
    except ProcessLookupError:
        pass


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
