"""The things measured: the instant upstream (direct), the bare relay, fleetgate, LiteLLM.

Each ``start_*`` function starts one process, waits until it answers a real chat completion,
and returns a :class:`Target`. A target that cannot be started for a reason the user can fix
(fleetgate's ``serve`` not there yet) raises :class:`Skip` with that reason.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import litellm_env
from wrkrun import request_body

from procs import Proc, free_port, http_ok

HERE = Path(__file__).resolve().parent
CHAT_PATH = "/v1/chat/completions"


class Skip(Exception):
    """A target that cannot run here, with the reason to print."""


@dataclass
class Target:
    """A measured endpoint: where to send requests, with which key, and its process."""

    name: str
    base_url: str
    api_key: str | None
    proc: Proc

    @property
    def url(self) -> str:
        """The chat-completions URL wrk hits."""
        return self.base_url + CHAT_PATH

    def headers(self) -> dict[str, str]:
        """Request headers, including the bearer key when the target checks one."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def ready(self) -> bool:
        """True once the target answers a JSON chat completion."""
        return http_ok(self.url, request_body(False), self.headers())

    def smoke(self) -> None:
        """Check both modes end to end; raise with what came back if either is wrong."""
        for stream in (False, True):
            request = urllib.request.Request(self.url, request_body(stream), self.headers())
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    body = response.read().decode(errors="replace")
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:500]
                raise RuntimeError(f"{self.name}: HTTP {exc.code} {detail}") from exc
            expected = "data: [DONE]" if stream else '"choices"'
            if expected not in body:
                raise RuntimeError(f"{self.name}: no {expected!r} in response: {body[:500]}")

    def start_ready(self, timeout_s: float) -> Target:
        """Wait for readiness, run the smoke check, and return self."""
        self.proc.wait_ready(self.ready, timeout_s)
        self.smoke()
        return self


def start_upstream(log_dir: Path, workers: int) -> Target:
    """The instant upstream; measuring it directly is the ``direct`` baseline."""
    port = free_port()
    argv = [sys.executable, str(HERE / "upstream.py"), "--port", str(port)]
    proc = Proc.start("upstream", [*argv, "--workers", str(workers)], log_dir)
    target = Target("direct", f"http://127.0.0.1:{port}", None, proc)
    return target.start_ready(30)


def start_bare(log_dir: Path, upstream: str) -> Target:
    """The bare relay in front of ``upstream``."""
    port = free_port()
    argv = [sys.executable, str(HERE / "bare_relay.py"), "--port", str(port)]
    proc = Proc.start("bare", [*argv, "--upstream", upstream], log_dir)
    return Target("bare", f"http://127.0.0.1:{port}", None, proc).start_ready(30)


def fleetgate_command(
    repo: Path, override: str | None, src: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """The command that runs the fleetgate CLI, and the environment it needs.

    ``src``: run the package from that source tree instead (``--baseline-src``: the same
    interpreter and dependencies, another version of fleetgate)."""
    if src is not None:
        return [sys.executable, "-m", "fleetgate.cli.main"], {"PYTHONPATH": str(src)}
    if override:
        return shlex.split(override), {}
    exe = repo / ".venv" / "bin" / "fleetgate"
    if exe.exists():
        return [str(exe)], {}
    return [sys.executable, "-m", "fleetgate.cli.main"], {"PYTHONPATH": str(repo / "src")}


CORE_CONFIG = Path(__file__).parent / "configs" / "core.yaml"


def fleetgate_config(path: Path, upstream: str, template: Path | None) -> Path:
    """Write the gateway config; a template's ``{upstream}`` becomes the upstream base URL.

    Without a template: ``configs/core.yaml``, every gateway-core feature on.
    """
    source = template if template is not None else CORE_CONFIG
    path.write_text(source.read_text().replace("{upstream}", upstream))
    return path


def start_fleetgate(
    log_dir: Path,
    upstream: str,
    master_key: str,
    repo: Path,
    command_override: str | None = None,
    config_template: Path | None = None,
    *,
    name: str = "fleetgate",
    src: Path | None = None,
) -> Target:
    """fleetgate with one worker; :class:`Skip` when its ``serve`` command is not there yet.

    ``name`` and ``src`` start a second fleetgate from another source tree (the baseline)."""
    argv, env = fleetgate_command(repo, command_override, src)
    probe = subprocess.run(
        [*argv, "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )
    if probe.returncode != 0:
        tail = " | ".join((probe.stderr or probe.stdout).strip().splitlines()[-2:])
        raise Skip(
            f"`fleetgate serve` is not available yet (`{shlex.join(argv)} serve --help` "
            f"exited {probe.returncode}: {tail}); pass --fleetgate-cmd to point elsewhere"
        )
    config = fleetgate_config(log_dir / f"{name}.yaml", upstream, config_template)
    port = free_port()
    serve = ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    serve += ["--data-dir", str(log_dir / f"{name}-data")]
    env["FLEETGATE_MASTER_KEY"] = master_key
    proc = Proc.start(name, [*argv, *serve, "--workers", "1"], log_dir, env, cwd=log_dir)
    return Target(name, f"http://127.0.0.1:{port}", master_key, proc).start_ready(120)


def start_litellm(
    log_dir: Path, upstream: str, master_key: str, venv: Path, spec: str
) -> tuple[Target, str]:
    """LiteLLM Proxy with one worker, installed on first use; returns it and its version."""
    exe = litellm_env.ensure_venv(venv, spec)
    config = litellm_env.write_config(log_dir / "litellm.yaml", upstream, master_key)
    port = free_port()
    argv = litellm_env.command(exe, config, port)
    proc = Proc.start("litellm", argv, log_dir, litellm_env.environment(), cwd=log_dir)
    target = Target("litellm", f"http://127.0.0.1:{port}", master_key, proc)
    return target.start_ready(300), litellm_env.version(venv)
