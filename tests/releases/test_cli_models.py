"""``fleetgate models ...`` against a real gateway: register, list, show, promote, rollback,
history; errors are one line and exit 2."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fleetgate.cli.main import main as cli_main
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, registry_config, running_gateway


async def test_models_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with (
        running_sim(SimConfig(model="tiny", mode="echo")) as sim,
        running_gateway(registry_config(sim), tmp_path, None) as gw,
    ):
        common = ["--url", gw.url, "--key", MASTER]

        def cli(*args: str, code: int = 0) -> str:
            assert cli_main([*args, *common]) == code
            captured = capsys.readouterr()
            return captured.out + captured.err

        card = tmp_path / "card.md"
        card.write_text("# chat v1\nA small model.")
        for n in (1, 2):
            out = await asyncio.to_thread(
                cli, "models", "register", "chat", "--artifact-uri", f"s3://m/{n}",
                "--api-base", f"{sim}/v1", "--served-model", "tiny", "--tensor-parallel", "2",
                "--card", str(card),
            )  # fmt: skip
            assert f"v{n}" in out and f"s3://m/{n}" in out
        out = await asyncio.to_thread(cli, "models", "promote", "chat", "v1", "-o", "json")
        assert json.loads(out) == [{"stage": "production", "from_version": None,
                                    "to_version": "v1"}]  # fmt: skip
        out = await asyncio.to_thread(
            cli, "models", "promote", "chat", "v2", "--expected", "v0", code=2
        )
        assert "409" in out
        await asyncio.to_thread(cli, "models", "promote", "chat", "v2", "--expected", "v1")
        out = await asyncio.to_thread(cli, "models", "list", "-o", "json")
        assert json.loads(out)[0]["production"] == "v2"
        out = await asyncio.to_thread(cli, "models", "show", "chat", "v1", "-o", "json")
        shown = json.loads(out)[0]
        assert shown["card"].startswith("# chat v1") and shown["tensor_parallel"] == 2
        out = await asyncio.to_thread(cli, "models", "rollback", "chat")
        assert "v2" in out and "v1" in out
        status, deployment, _ = await gw.chat()
        assert status == 200
        assert {d.version for d in gw.state.tables.table.route("chat").deployments} == {"v1"}
        out = await asyncio.to_thread(cli, "models", "history", "chat", "-o", "csv")
        lines = out.strip().splitlines()
        assert lines[0].startswith("id,action") and len(lines) == 4
        out = await asyncio.to_thread(cli, "models", "show", "nope", code=2)
        assert "404" in out
