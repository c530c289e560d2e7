"""Child processes for the benchmark: start, wait until ready, measure memory, stop."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    """One started server process (and its children), with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        """Start ``argv`` in its own process group, output to ``log_dir/<name>.log``."""
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                cwd=cwd,
            )
        return cls(name, popen, log_path)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the process's output, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, probe: Callable[[], bool], timeout_s: float) -> None:
        """Poll ``probe`` until it returns True; raise with the log tail if it never does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            if probe():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it lingers."""
        if not self.alive():
            return
        pgid = self.popen.pid  # start_new_session made the child its group leader
        try:
            os.killpg(pgid, signal.SIGTERM)
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.popen.wait(timeout_s)
        except ProcessLookupError:
            pass

    def rss_bytes(self) -> int:
        """Resident memory of the process and all its descendants, in bytes."""
        return sum(rss_of(pid) for pid in descendants(self.popen.pid))


def http_ok(url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None) -> bool:
    """True when ``url`` answers 2xx (GET, or POST when ``body`` is given) within 2 s."""
    request = urllib.request.Request(url, data=body, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            response.read()
            status: int = response.status
            return 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, read from /proc (psutil when installed)."""
    try:
        psutil = importlib.import_module("psutil")
        parent = psutil.Process(pid)
        return [pid] + [int(child.pid) for child in parent.children(recursive=True)]
    except ImportError:
        pass
    except Exception:  # the process may be gone: psutil.NoSuchProcess
        return [pid]
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def rss_of(pid: int) -> int:
    """VmRSS of one process in bytes, 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
