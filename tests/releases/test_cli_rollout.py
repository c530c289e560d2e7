"""``fleetgate rollout ...`` against a real gateway."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from fleetgate.cli.main import main as cli_main
from fleetgate.cli.rollout import duration_s
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, registry_config, running_gateway, version_body


def test_durations() -> None:
    assert duration_s("5m") == 300 and duration_s("90s") == 90 and duration_s("250ms") == 0.25
    assert duration_s("1.5h") == 5400 and duration_s("12") == 12
    for bad in ("soon", "-1m", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration_s(bad)


async def test_rollout_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with (
        running_sim(SimConfig(mode="echo")) as sim,
        running_gateway(registry_config(sim), tmp_path, None) as gw,
    ):
        await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
        for n in (1, 2):
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           json=version_body(sim, n))  # fmt: skip
        await gw.admin("POST", "/admin/registry/models/chat/promote",
                       json={"stage": "production", "version": "v1"})  # fmt: skip
        common = ["--url", gw.url, "--key", MASTER]

        def cli(*args: str, code: int = 0) -> str:
            assert cli_main([*args, *common]) == code
            captured = capsys.readouterr()
            return captured.out + captured.err

        out = await asyncio.to_thread(
            cli, "rollout", "start", "chat", "--to", "v2", "--steps", "10,100",
            "--interval", "5m", "-o", "json",
        )  # fmt: skip
        started = json.loads(out)[0]
        assert (started["percent"], started["interval_s"], started["status"]) == (
            10,
            300,
            "running",
        )
        # the candidate's deployments join the alias's, the picker sends it its share
        await asyncio.sleep(0.1)
        versions = {d.version for d in gw.state.tables.table.route("chat").deployments}
        assert versions == {"v1", "v2"}
        out = await asyncio.to_thread(cli, "rollout", "pause", "chat")
        assert "paused" in out
        out = await asyncio.to_thread(cli, "rollout", "status", "-o", "json")
        assert json.loads(out)[0]["status"] == "paused"
        await asyncio.to_thread(cli, "rollout", "resume", "chat")
        out = await asyncio.to_thread(cli, "rollout", "abort", "chat", "-o", "json")
        assert json.loads(out)[0]["percent"] == 0
        assert {d.version for d in gw.state.tables.table.route("chat").deployments} == {"v1"}
        out = await asyncio.to_thread(cli, "rollout", "abort", "chat", code=2)
        assert "409" in out
        out = await asyncio.to_thread(
            cli, "rollout", "start", "chat", "--to", "v2", "--steps", "50,10", code=2
        )
        assert "400" in out and "steps" in out
        out = await asyncio.to_thread(cli, "rollout", "start", "tiny", "--to", "v2", code=2)
        assert "400" in out and "registry" in out
