"""`LocalLauncher`: a version's engines as processes on this machine.

Each engine runs the version's serve command (`fleetgate.releases.launchers.base.serve_spec`)
on 127.0.0.1: on the port of the version's deployment when its ``api_base`` is a loopback
address with a port (so the gateway's ``alias@version`` reaches it), else on a free port. Its
output goes to ``<log_dir>/<model>-<version>-<role>-<n>.log``. ``start`` waits at most
``start_timeout_s`` for ``GET /health``; an engine that exits or does not answer in time is
killed and the start fails. ``stop`` sends SIGTERM, then SIGKILL after ``stop_timeout_s``.

The processes are found again by their pid and port (``Engines.detail``), so a gateway
restarted while its pipeline had engines up can check and stop them. A launch is announced
(`fleetgate.releases.launchers.base.Record`) before its process starts: its port and a random
token the process carries in its environment (`fleetgate.releases.launchers.processes`), under
``detail["pending"]``; then again with its pid. A gateway that died between the start of an
engine and the end of its health wait leaves that record: `LocalLauncher.resume` finds the
process (by its pid, else by the token), adopts it once healthy or stops it, and starts what is
missing on the declared port (a free one when none is declared).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from fleetgate.errors import UpstreamConnectError
from fleetgate.releases.launchers.base import Engines, Record, ServeSpec, serve_spec
from fleetgate.releases.launchers.processes import (
    TOKEN_ENV,
    alive,
    kill_carriers,
    launched,
    remains,
    signal_group,
)

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


def _with(
    engines: Engines,
    ports: list[int],
    pids: list[int],
    tokens: dict[str, str],
    pending: list[dict[str, Any]] | None = None,
) -> Engines:
    """``engines`` answering on ``ports`` (``pending``: launches not healthy yet)."""
    detail = {**engines.detail, "ports": ports, "pids": pids, "tokens": tokens,
              "pending": [dict(p) for p in pending or []]}  # fmt: skip
    return Engines(engines.model, engines.version, engines.role,
                   [f"http://{_HOST}:{p}/v1" for p in ports], len(ports), detail)  # fmt: skip


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

    async def start(
        self,
        version: Mapping[str, Any],
        *,
        role: str,
        replicas: int = 1,
        record: Record | None = None,
    ) -> Engines:
        spec = serve_spec(version)
        engines = Engines(str(version["model"]), str(version["version"]), role, [], 0,
                          {"spec": {"kind": spec.kind, "argv": spec.argv,
                                    "served_model": spec.served_model},
                           "ports": [], "pids": [], "tokens": {}, "pending": [],
                           "declared": _declared_ports(version)})  # fmt: skip
        return await self._grow(engines, spec, replicas, record)

    async def resume(
        self,
        version: Mapping[str, Any],
        engines: Engines,
        *,
        replicas: int,
        record: Record | None = None,
    ) -> Engines:
        tokens: dict[str, str] = dict(engines.detail.get("tokens", {}))
        ports: list[int] = []
        pids: list[int] = []
        for pid, port in zip(engines.detail.get("pids", []), engines.detail.get("ports", []),
                             strict=True):  # fmt: skip
            if await self._adopt(pid, port, tokens.get(str(pid))):
                ports.append(port)
                pids.append(pid)
        for launch in engines.detail.get("pending", []):
            port, token, recorded = int(launch["port"]), str(launch["token"]), launch.get("pid")
            found = [recorded] if recorded and alive(recorded, port, token) else launched(token)
            for n, pid in enumerate(found):
                if n == 0 and await self._adopt(pid, port, token):
                    ports.append(port)
                    pids.append(pid)
                    tokens[str(pid)] = token
                else:  # a second engine of one launch cannot be: stopped
                    await self._kill(pid, port, token)
        kept = {str(p): tokens[str(p)] for p in pids if str(p) in tokens}
        running = _with(engines, ports, pids, kept)
        # which engines were found running rather than started (shown on the run's timeline)
        adopted = replace(running, detail={**running.detail, "adopted": list(pids)})
        if record is not None:
            await record(adopted)
        spec = ServeSpec(**engines.detail["spec"])
        return await self._grow(adopted, spec, replicas, record)

    async def _adopt(self, pid: int, port: int, token: str | None) -> bool:
        """Whether the engine ``pid`` (started before a restart) is, or becomes in time,
        healthy; one that is not is stopped."""
        try:
            await self._wait_healthy(pid, port, token)
        except UpstreamConnectError:
            await self._kill(pid, port, token)
            return False
        return True

    async def _grow(
        self, engines: Engines, spec: ServeSpec, replicas: int, record: Record | None = None
    ) -> Engines:
        ports, pids = list(engines.detail["ports"]), list(engines.detail["pids"])
        tokens: dict[str, str] = dict(engines.detail.get("tokens", {}))
        declared = [p for p in engines.detail.get("declared", []) if p not in ports]
        pending: list[dict[str, Any]] = []
        try:
            for n in range(len(ports), replicas):
                port = declared.pop(0) if declared else _free_port()
                launch: dict[str, Any] = {"port": port, "token": os.urandom(12).hex(), "pid": None}
                pending.append(launch)
                if record is not None:  # the intent, durably, before the process exists
                    await record(_with(engines, ports, pids, tokens, pending))
                launch["pid"] = await self._spawn(engines, spec, port, n, launch["token"])
            if record is not None and pending:
                await record(_with(engines, ports, pids, tokens, pending))
            await asyncio.gather(
                *(self._wait_healthy(p["pid"], p["port"], p["token"]) for p in pending)
            )
        except BaseException:
            await asyncio.gather(
                *(self._kill(p["pid"], p["port"], p["token"]) for p in pending if p["pid"])
            )
            raise
        for launch in pending:
            ports.append(launch["port"])
            pids.append(launch["pid"])
            tokens[str(launch["pid"])] = launch["token"]
        return _with(engines, ports, pids, tokens)

    async def _spawn(self, engines: Engines, spec: ServeSpec, port: int, n: int, token: str) -> int:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{engines.model}-{engines.version}-{engines.role}-{n}.log"
        with log.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *_argv(spec, port), stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, TOKEN_ENV: token},
            )  # fmt: skip
        self._procs[proc.pid] = proc
        return proc.pid

    async def _wait_healthy(self, pid: int, port: int, token: str | None = None) -> None:
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
                if proc is None and not alive(pid, port, token):  # adopted: not our child
                    raise UpstreamConnectError(f"the engine on port {port} is gone")
                if await _answers(session, url):
                    return
                await asyncio.sleep(self.poll_s)
        raise UpstreamConnectError(
            f"the engine on port {port} was not healthy within {self.start_timeout_s:g} s"
        )

    async def healthy(self, engines: Engines) -> bool:
        ports: list[int] = engines.detail.get("ports", [])
        if not ports or engines.detail.get("pending"):
            return False
        async with aiohttp.ClientSession() as session:
            answers = await asyncio.gather(
                *(_answers(session, f"http://{_HOST}:{p}/health") for p in ports)
            )
        return all(answers)

    async def scale(
        self, engines: Engines, replicas: int, *, record: Record | None = None
    ) -> Engines:
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        if engines.detail.get("pending"):  # a scale-up cut short: adopt or stop what it left
            engines = await self.resume({}, engines, replicas=0, record=record)
        ports, pids = list(engines.detail["ports"]), list(engines.detail["pids"])
        if replicas >= len(ports):
            spec = ServeSpec(**engines.detail["spec"])
            return await self._grow(engines, spec, replicas, record)
        tokens: dict[str, str] = engines.detail.get("tokens", {})
        await asyncio.gather(*(self._kill(pid, port, tokens.get(str(pid))) for pid, port in
                               zip(pids[replicas:], ports[replicas:], strict=True)))  # fmt: skip
        ports, pids = ports[:replicas], pids[:replicas]
        return _with(engines, ports, pids, {str(p): tokens[str(p)] for p in pids
                                            if str(p) in tokens})  # fmt: skip

    async def stop(self, engines: Engines) -> None:
        tokens: dict[str, str] = engines.detail.get("tokens", {})
        pids: list[int] = engines.detail.get("pids", [])
        ports: list[int] = engines.detail.get("ports", [])
        kills = [self._kill(p, q, tokens.get(str(p))) for p, q in zip(pids, ports, strict=True)]
        for launch in engines.detail.get("pending", []):
            token, port = str(launch["token"]), int(launch["port"])
            found = set(launched(token)) | ({int(launch["pid"])} if launch.get("pid") else set())
            kills += [self._kill(pid, port, token) for pid in found]
        await asyncio.gather(*kills)

    async def _kill(self, pid: int, port: int, token: str | None = None) -> None:
        """SIGTERM to the engine's group, SIGKILL after ``stop_timeout_s``; returns once the
        engine and every worker carrying its token are gone (bounded)."""
        proc = self._procs.pop(pid, None)
        if proc is None and not remains(pid, port, token):
            return  # gone already (or the pid now belongs to something else)
        signal_group(pid, signal.SIGTERM)
        if await self._gone(proc, pid, port, token, self.stop_timeout_s):
            return
        signal_group(pid, signal.SIGKILL)
        kill_carriers(token)
        if proc is not None:
            await proc.wait()
        await self._gone(proc, pid, port, token, self.stop_timeout_s)

    async def _gone(
        self,
        proc: asyncio.subprocess.Process | None,
        pid: int,
        port: int,
        token: str | None,
        timeout_s: float,
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            exited = proc.returncode is not None if proc is not None else True
            if exited and not remains(pid, port, token):
                return True
            await asyncio.sleep(0.05)
        return False


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
