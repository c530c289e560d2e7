"""How long a locally launched simulator engine takes to start answering ``/health`` and to
exit on SIGTERM, as the release pipeline's `LocalLauncher` starts and stops it, with the
command line built for the one sub-command (``build_parser("sim")``, what ``fleetgate sim``
does now) against the whole command line (every sub-command's module imported, as before).
Medians of 5 each, interleaved, in the same run; prints the ratio.

    .venv/bin/python bench/releases/engine_start.py
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

LAUNCH = """
import sys
from fleetgate.cli.main import build_parser
only = None if sys.argv[1] == "all" else "sim"
args = build_parser(only).parse_args(sys.argv[2:])
sys.exit(args.func(args) or 0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def once(which: str) -> tuple[float, float]:
    port = free_port()
    began = time.monotonic()
    argv = [sys.executable, "-c", LAUNCH, which, "sim", "--mode", "echo", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.monotonic() - began < 120:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.02)
        up = time.monotonic() - began
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        return up, time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()


def main() -> None:
    runs: dict[str, list[tuple[float, float]]] = {"all": [], "sim": []}
    for _ in range(5):
        for which in runs:
            runs[which].append(once(which))
    med = {w: (statistics.median(u for u, _ in r), statistics.median(d for _, d in r))
           for w, r in runs.items()}  # fmt: skip
    print(f"load average: {os.getloadavg()}")
    for which, (up, down) in med.items():
        print(f"{which:>3}: healthy after {up:.2f} s, exited {down:.2f} s after SIGTERM")
    print(
        f"start ratio all/sim: {med['all'][0] / med['sim'][0]:.1f}x; "
        f"stop ratio: {med['all'][1] / med['sim'][1]:.1f}x"
    )


if __name__ == "__main__":
    main()
