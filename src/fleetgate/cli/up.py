"""``fleetgate up``: the embedded default, zero setup.

Starts two simulated engines, writes a config for the aliases ``fast-small`` and ``smart``
under ``./.fleetgate/``, and serves the gateway on 127.0.0.1:4000 with SQLite under that
directory and in-process limits. The banner (URL, master key, a curl line) is printed once the
gateway accepts connections.

``fast-small`` has a second deployment at 127.0.0.1:8001 (``--flaky-port``) that nothing
serves until you start one there, e.g. a flaky engine (``fleetgate sim --port 8001
--error-rate 0.5``): until then it is cooled down after its first refused connection, and
its health probe brings it into rotation once it answers (the README's "Break things").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Collection
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli.parsers import add_command
from fleetgate.cli.processes import free_port, stop, wait_http
from fleetgate.cli.serve import _use_uvloop, listen_error, serve_forever
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError

__all__ = ["default_config", "print_banner", "register", "run"]

# (alias, sim flags): a quick small model and a slower, smarter one.
ENGINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fast-small", ("--prefill-ms-per-token", "0.05", "--decode-ms-per-step", "5")),
    ("smart", ("--prefill-ms-per-token", "0.2", "--decode-ms-per-step", "20")),
)


def register(sub: Any) -> None:
    parser = add_command(
        sub, "up", "run the embedded default: gateway + simulated engines + SQLite", __doc__
    )
    parser.add_argument("--port", type=int, default=4000, help="gateway port (default: 4000)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".fleetgate"),
        help="config, master key, SQLite database and engine logs (default: ./.fleetgate)",
    )
    parser.add_argument(
        "--engine-port",
        type=int,
        default=4101,
        help="first simulated engine's port; a busy one is replaced by a free one (default: 4101)",
    )
    parser.add_argument(
        "--flaky-port",
        type=int,
        default=8001,
        help="port of fast-small's second deployment, served by nothing until you start an "
        "engine there (default: 8001)",
    )
    parser.set_defaults(func=run)


def _deployment(alias: str, url: str, name: str | None = None) -> dict[str, Any]:
    dep: dict[str, Any] = {
        "provider": "openai",
        "model": "tiny",
        "api_base": url,
        "context_window": 32768,
        "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.4}
        if alias == "fast-small"
        else {"input_per_mtok": 1.0, "output_per_mtok": 4.0},
        "tags": ["local"],
    }
    if name is not None:
        dep["name"] = name
    return dep


def default_config(engine_urls: dict[str, str], flaky_url: str | None = None) -> dict[str, Any]:
    """The config `up` writes: each alias on its own simulated engine; fast-small → smart;
    ``flaky_url``: a second fast-small deployment (named ``flaky``) for an engine you start."""
    models = []
    for alias, url in engine_urls.items():
        deployments = [_deployment(alias, url)]
        if alias == "fast-small" and flaky_url is not None:
            deployments.append(_deployment(alias, flaky_url, "flaky"))
        models.append(
            {
                "alias": alias,
                "strategy": "least-load",
                "fallbacks": [a for a in engine_urls if a != alias][:1]
                if alias == "fast-small"
                else [],
                "deployments": deployments,
            }
        )
    return {"models": models}


def _master_key(data_dir: Path) -> str:
    if os.environ.get("FLEETGATE_MASTER_KEY"):
        return os.environ["FLEETGATE_MASTER_KEY"]
    path = data_dir / "master_key"
    if path.exists():
        return path.read_text().strip()
    key = "sk-fg-master-" + secrets.token_urlsafe(24)
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


def _start_engines(
    first_port: int, data_dir: Path, reserved: Collection[int] = ()
) -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
    """One simulated engine per alias from ``first_port`` up, never on a ``reserved`` port
    (the gateway's, and the flaky one the user starts an engine on later: free now, taken
    then)."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    taken = set(reserved)
    wanted = first_port
    for alias, flags in ENGINES:
        while wanted in taken:
            wanted += 1
        port = free_port(wanted)  # engines are internal: any free port will do
        while port in taken:  # the system's pick: never one of ours either
            port = free_port()
        taken.add(port)
        wanted += 1
        cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port), *flags]
        with (data_dir / f"engine-{alias}.log").open("ab") as log:  # the child keeps its copy
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        urls[alias] = f"http://127.0.0.1:{port}/v1"
    try:
        for url, proc in zip(urls.values(), procs, strict=True):
            wait_http(url.removesuffix("/v1") + "/health", proc)
    except (RuntimeError, TimeoutError) as exc:
        _stop(procs)  # never leave an engine behind
        msg = f"a simulated engine did not start ({exc}); see {data_dir}/engine-*.log"
        raise SystemExit(msg) from None
    except BaseException:
        _stop(procs)
        raise
    return procs, urls


def _check_port(port: int) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the gateway binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigError(listen_error("127.0.0.1", port, exc)) from None


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        stop(proc, timeout=5)


def run(args: argparse.Namespace) -> int:
    _check_port(args.port)  # before the engines start, not half a minute later
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    key = _master_key(data_dir)
    procs, urls = _start_engines(args.engine_port, data_dir, (args.port, args.flaky_port))
    config_path = data_dir / "config.yaml"
    flaky = f"http://127.0.0.1:{args.flaky_port}/v1"
    config_path.write_text(yaml.safe_dump(default_config(urls, flaky), sort_keys=False))
    base = f"http://127.0.0.1:{args.port}"
    try:  # whatever happens from here on, the engines are stopped
        settings = Settings.from_env(
            master_key=key, config_path=config_path, port=args.port, data_dir=data_dir
        )
        _use_uvloop()
        banner = partial(print_banner, base, key, config_path, list(urls), args.flaky_port)
        asyncio.run(serve_forever(settings, on_listening=banner))
    finally:
        _stop(procs)
    return 0


def print_banner(
    base: str, key: str, config_path: Path, aliases: list[str], flaky_port: int | None = None
) -> None:
    """What a new user needs: the URL, the master key, the aliases and a request to try."""
    print(f"fleetgate is up at {base}/v1")
    print(f"  master key: {key}")
    print(f"  config:     {config_path}  (edit it: changes apply without a restart)")
    print(f"  aliases:    {', '.join(aliases)}  (simulated engines: they answer made-up words)")
    if flaky_port is not None:
        print(f"  fast-small also routes to 127.0.0.1:{flaky_port} once an engine answers there")
    print(
        f"  try: curl {base}/v1/chat/completions -H 'Authorization: Bearer {key}' "
        "-H 'Content-Type: application/json' "
        """-d '{"model": "fast-small", "messages": [{"role": "user", "content": "Hello!"}]}'"""
    )
    print("  stop: Ctrl-C")
    sys.stdout.flush()
