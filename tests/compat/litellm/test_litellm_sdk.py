"""LiteLLM's own SDK as a client of fleetgate, from its own virtualenv.

The venv is ``$FLEETGATE_LITELLM_VENV`` (default ``/tmp/fleetgate-litellm``, made by
``scripts/install-litellm.sh``, which ``.ci/run`` runs); without it the test skips and says so.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from tests.tenancy.support import running_gateway

VENV = Path(os.environ.get("FLEETGATE_LITELLM_VENV", "/tmp/fleetgate-litellm"))
CLIENT = Path(__file__).with_name("litellm_client.py")


@pytest.mark.slow
async def test_litellm_sdk_calls_fleetgate_as_a_litellm_proxy(
    upstream: str, tmp_path: Path
) -> None:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no LiteLLM venv at {VENV} (scripts/install-litellm.sh makes it)")
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, _, key = await gw.team_and_key("ml")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        proc = await asyncio.create_subprocess_exec(
            str(python), str(CLIENT), gw.url, key, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["proxy_chat"] and result["proxy_stream"] and result["openai_chat"]
    assert result["proxy_embedding"] > 0
    assert result["wrong_key"] == "AuthenticationError"
