"""What the numbers were measured on: CPU, cores, memory, kernel, tool versions, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _first(path: str, prefix: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _output(argv: list[str], cwd: Path | None = None, any_rc: bool = False) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (done.stdout or done.stderr).strip()
    ok = done.returncode == 0 or any_rc
    return text.splitlines()[0] if ok and text else "unknown"


def describe(repo: Path) -> dict[str, str]:
    """A flat description of the box and the software under test."""
    mem_kib = _first("/proc/meminfo", "MemTotal").split()[0]
    mem = f"{int(mem_kib) / 2**20:.0f} GiB" if mem_kib.isdigit() else "unknown"
    commit = _output(["git", "rev-parse", "--short", "HEAD"], repo)
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"], repo)
    wrk = _output(["/usr/bin/wrk", "--version"], any_rc=True).split(" Copyright")[0]
    wrk = wrk.removeprefix("wrk ")
    return {
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cores": str(os.cpu_count()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "wrk": wrk,
        "commit": commit + (" (modified)" if dirty not in ("", "unknown") else ""),
    }
