"""LiteLLM Proxy as a peer target, installed into a throwaway virtualenv.

The virtualenv (default ``/tmp/fleetgate-bench-litellm``) is created with
``pip install 'litellm[proxy]'`` on first use and reused afterwards; fleetgate's own
environment never sees LiteLLM. The proxy is started with defaults apart from what the
benchmark needs: one worker, bound to 127.0.0.1, a master key (fleetgate checks keys too), and
``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that start-up does not wait on a download.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEFAULT_VENV = Path("/tmp/fleetgate-bench-litellm")
DEFAULT_SPEC = "litellm[proxy]"


def ensure_venv(venv: Path, spec: str = DEFAULT_SPEC, python: str | None = None) -> Path:
    """Return the ``litellm`` executable in ``venv``, creating and installing it if absent."""
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    base = python or _base_python()
    print(f"[litellm] creating {venv} and installing {spec!r} (a few minutes, once)", flush=True)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = str(venv / "bin" / "pip")
    subprocess.run([pip, "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([pip, "install", "-q", spec], check=True)
    if not exe.exists():
        raise RuntimeError(f"pip install {spec!r} did not provide {exe}")
    return exe


def _base_python() -> str:
    """The interpreter behind the running one, so the new venv does not nest in ours."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return str(base) if base.exists() else sys.executable


def version(venv: Path) -> str:
    """The installed LiteLLM version string."""
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def write_config(path: Path, upstream_base: str, master_key: str) -> Path:
    """Write a proxy config that maps model ``tiny`` to the instant upstream."""
    path.write_text(
        "model_list:\n"
        "  - model_name: tiny\n"
        "    litellm_params:\n"
        "      model: openai/tiny\n"
        f"      api_base: {upstream_base}/v1\n"
        "      api_key: dummy\n"
        "general_settings:\n"
        f"  master_key: {master_key}\n"
    )
    return path


def command(exe: Path, config: Path, port: int) -> list[str]:
    """The command line that starts the proxy with one worker on 127.0.0.1."""
    return [
        str(exe),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


def environment() -> dict[str, str]:
    """Environment overrides: no cost-map download, quiet logs."""
    return {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
