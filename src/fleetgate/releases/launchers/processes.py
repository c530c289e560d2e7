"""Finding the local launcher's engine processes again, after the gateway that started them died.

Each engine is started in a session of its own (its pid is its process group) and carries a
random launch token in its environment (``FLEETGATE_LAUNCH=<token>``), recorded before the
process starts. A process is the recorded engine when it still carries that token (a recycled pid
does not; a zombie shows no environment); without a token (records older than tokens), when its
command line still names the port.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TOKEN_ENV", "alive", "carriers", "launched", "signal_group"]

TOKEN_ENV = "FLEETGATE_LAUNCH"


def alive(pid: int, port: int, token: str | None = None) -> bool:
    """Whether ``pid`` is still the engine launched on ``port`` (with ``token`` when known)."""
    if token is not None:
        return _carries(pid, token)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(port).encode() in cmdline


def _carries(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False
    return f"{TOKEN_ENV}={token}".encode() in environ


def _pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def carriers(token: str) -> list[int]:
    """Every live process carrying the launch ``token``: the engine and its workers."""
    return [pid for pid in _pids() if _carries(pid, token)]


def launched(token: str) -> list[int]:
    """The engines carrying the launch ``token``: the process-group leaders among the processes
    that carry it (an engine's workers inherit the token and the group)."""
    found = carriers(token)
    leaders = []
    for pid in found:
        try:
            if os.getpgid(pid) == pid:
                leaders.append(pid)
        except ProcessLookupError:
            continue
    return leaders or found


def signal_group(pid: int, sig: int) -> None:
    """``sig`` to the engine's process group (the engine and any workers it started)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def remains(pid: int, port: int, token: str | None) -> bool:
    """Whether the engine, or any worker of it, still runs (workers carry its token and may
    outlive it for a moment: vLLM's engine core and its workers)."""
    if token is not None:
        return bool(carriers(token))
    return alive(pid, port)


def kill_carriers(token: str | None) -> None:
    """SIGKILL to every process still carrying ``token`` (one that left the engine's group)."""
    for pid in carriers(token) if token is not None else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
