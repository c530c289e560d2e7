"""Child processes on 127.0.0.1: a free port, waiting until one answers, stopping it.

Used by ``fleetgate up`` for its simulated engines, and by tests and benchmarks that start
``fleetgate sim`` / ``fleetgate serve`` (or a peer) as real processes.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request

__all__ = ["free_port", "stop", "wait_http"]


def free_port(preferred: int = 0) -> int:
    """``preferred`` when it can be bound on 127.0.0.1, else a port the system picks."""
    for candidate in (preferred, 0) if preferred else (0,):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free port on 127.0.0.1")


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Return once ``url`` answers below 500; raise if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status < 500:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
