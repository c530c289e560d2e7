"""The README's five-minute tour, run as written against ``make run``'s gateway.

``make run`` is ``fleetgate up`` once the venv exists: it is started here on free ports (the
tour's ``127.0.0.1:4000``, ``8001`` and the ``sk-fg-master-...`` it prints are substituted),
then every code block of the tour runs in order, as a user would type it in a second terminal:
shell lines through bash (exports carry over), Python blocks through this interpreter. A line
that ends in ``&`` runs in the background. Each command must succeed and do what the text says
around it; none is skipped (the test counts them).
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetgate.cli.processes import stop, wait_http
from tests.procs import free_port, metric_value

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: `fleetgate` is there
STEP_TIMEOUT_S = 240.0

pytestmark = pytest.mark.slow


def tour_blocks() -> list[tuple[str, str]]:
    """(language, code) of each fenced block of the tour section, in order."""
    text = (ROOT / "README.md").read_text("utf-8")
    tour = text.split("## Five-minute tour", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w*)\n(.*?)^```", tour, flags=re.S | re.M)


def shell_lines(code: str) -> list[str]:
    """The commands of a shell block (continuation lines joined)."""
    return [line.strip() for line in code.replace("\\\n", " ").splitlines() if line.strip()]


@contextmanager
def make_run(tmp: Path) -> Iterator[tuple[str, str, int, list[str]]]:
    """``fleetgate up`` on free ports; yields (base URL, master key, flaky port, banner)."""
    port, engine_port, flaky = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETGATE_", "OPENAI_"))}
    cmd = [str(BIN / "fleetgate"), "up", "--port", str(port), "--engine-port",
           str(engine_port), "--flaky-port", str(flaky)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace").rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    banner: list[str] = []
    deadline = time.monotonic() + 180
    try:
        while not any(line.strip().startswith("stop:") for line in banner):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError("fleetgate up never printed its banner:\n" + "\n".join(banner))
            try:
                banner.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        key = next(line.split(":", 1)[1].strip() for line in banner if "master key:" in line)
        yield f"http://127.0.0.1:{port}", key, flaky, banner
    finally:
        stop(proc, timeout=20)  # `up` stops its engines on the way out
        reader.join(timeout=10)  # to the end of its output
        assert proc.stdout is not None
        proc.stdout.close()


class Terminal:
    """A user's second terminal: bash, with exports carried from one command to the next."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.state = cwd / ".tour-env.sh"
        self.state.write_text("")
        self.env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        for name in [k for k in self.env if k.startswith(("FLEETGATE_", "OPENAI_"))]:
            del self.env[name]
        self.background: list[subprocess.Popen[bytes]] = []

    def run(self, command: str) -> str:
        script = f"source {self.state}\nset -euo pipefail\n{command}\nexport -p > {self.state}\n"
        done = subprocess.run(
            ["bash", "-c", script], cwd=self.cwd, env=self.env, capture_output=True,
            text=True, timeout=STEP_TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, command: str) -> subprocess.Popen[bytes]:
        script = f"source {self.state}\nexec {command}"
        proc = subprocess.Popen(
            ["bash", "-c", script], cwd=self.cwd, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.background.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.background:
            stop(proc)


def _ready(url: str) -> dict[str, object]:
    try:
        with urllib.request.urlopen(url + "/health/ready", timeout=5) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return dict(json.loads(exc.read()))


def _wait_in_rotation(url: str, alias: str, healthy: int) -> None:
    """Until the gateway's health probe counts ``healthy`` deployments of ``alias``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        aliases = _ready(url).get("aliases", {})
        assert isinstance(aliases, dict)
        if aliases.get(alias, {}).get("healthy") == healthy:
            return
        time.sleep(0.5)
    raise AssertionError(f"{alias} never had {healthy} healthy deployments: {_ready(url)}")


def _check(command: str, out: str, cwd: Path) -> None:
    """What the text around ``command`` says it does."""
    if "/metrics" in command and "fleetgate_requests_total" in command:
        assert metric_value(out, "fleetgate_requests_total", alias="fast-small") >= 2, out
    elif "x-fleetgate-" in command:
        headers = out.lower()
        assert "x-fleetgate-deployment:" in headers and "x-fleetgate-overhead-ms:" in headers
    elif command.startswith("fleetgate bench"):
        n = re.search(r"--num-requests (\d+)", command)
        assert n is not None
        assert re.search(rf"^completed\s+{n.group(1)}$", out, flags=re.M), out
        assert re.search(r"^failed\s+0$", out, flags=re.M), out  # retries hid every 500
        if "--html" in command:
            assert (cwd / command.split("--html", 1)[1].split()[0]).stat().st_size > 0
    elif "fleetgate_retries_total" in command:
        assert metric_value(out, "fleetgate_retries_total", alias="fast-small") > 0, out
    elif "/admin/config/reload" in command:
        assert json.loads(out)["status"] == "applied", out
    elif command.startswith("fleetgate teams create"):
        assert "search" in out
    elif command.startswith("fleetgate keys create"):
        assert "sk-fg-" in out
    elif command.startswith("fleetgate spend"):
        assert "master key" in out and "None" not in out, out
    elif command.startswith("fleetgate plan"):
        assert re.search(r"GPUs peak \(rounded up\)\s+1,000", out), out
        assert re.search(r"GPUs autoscaled, busiest hour\s+1,000", out), out


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "fleetgate up" in recipe  # what `make run` runs once the venv exists
    blocks = tour_blocks()
    assert [lang for lang, _ in blocks][:2] == ["", "sh"]  # the banner, then the exports
    ran = 0
    with make_run(tmp_path) as (url, key, flaky, banner):
        port = url.rsplit(":", 1)[1]

        def as_here(code: str) -> str:
            return (
                code.replace("127.0.0.1:4000", f"127.0.0.1:{port}")
                .replace("sk-fg-master-...", key)
                .replace("8001", str(flaky))
            )

        # the banner the README shows is the one printed (up to what differs per run)
        for line in blocks[0][1].splitlines():
            shown = as_here(line).split("...")[0].rstrip()
            assert any(printed.startswith(shown) for printed in banner), (line, banner)
        term = Terminal(tmp_path)
        try:
            for lang, code in blocks[1:]:
                if lang == "python":
                    done = subprocess.run(
                        [sys.executable, "-c", as_here(code)], cwd=tmp_path,
                        capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                    )  # fmt: skip
                    assert done.returncode == 0, f"{code}\n{done.stderr}"
                    assert done.stdout.strip(), code
                    if "include_usage" in code:
                        assert re.search(r"^\d+ tokens$", done.stdout, flags=re.M), done.stdout
                    ran += 1
                    continue
                assert lang == "sh", lang
                for command in shell_lines(as_here(code)):
                    if command.endswith("&"):  # a flaky engine behind fast-small
                        command = command.removesuffix("&").strip()
                        proc = term.start(command)
                        wait_http(f"http://127.0.0.1:{flaky}/health", proc, timeout=60)
                        _wait_in_rotation(url, "fast-small", 2)
                    else:
                        _check(command, term.run(command), tmp_path)
                    ran += 1
            with urllib.request.urlopen(url + "/ui", timeout=10) as resp:  # the console
                assert resp.status == 200
        finally:
            term.close()
    python = sum(1 for lang, _ in blocks if lang == "python")
    shell = sum(len(shell_lines(code)) for lang, code in blocks if lang == "sh")
    assert ran == python + shell >= 12  # every command of the tour ran
