"""``fleetgate spend`` shows what people call things: team names, a key's user or hint, the
master key's own traffic as "master key"; ids only with ``--ids``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.tenancy.support import MASTER, running_gateway

from fleetgate.cli.main import main as cli_main
from fleetgate.sim import SimConfig, running_sim


async def test_spend_names_teams_keys_and_the_master_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_sim(SimConfig(mode="random", output_len=4)) as up:
        async with running_gateway(up, tmp_path, None) as gw:
            team, key_id, key = await gw.team_and_key("search")
            status, user = await gw.admin(
                "POST", "/admin/users", json={"team": team, "name": "ada"}
            )
            assert status == 201
            _, bound = await gw.admin(
                "POST", "/admin/keys", json={"team": team, "user": user["id"]}
            )
            for k in (key, bound["key"], MASTER):
                assert (await gw.chat(k))[0] == 200
            await gw.tenancy.writer.flush()

            def spend(*extra: str) -> str:
                argv = ["spend", "--group-by", "team,key", "--url", gw.url, "--key", MASTER]
                assert cli_main([*argv, *extra]) == 0
                return capsys.readouterr().out

            out = await asyncio.to_thread(spend)
            lines = out.splitlines()
            assert lines[0].split()[:2] == ["team", "key"]
            assert any(line.startswith("search") and "ada (sk-fg-" in line for line in lines)
            assert any(line.startswith("master key") for line in lines)  # never blank, never None
            assert team not in out and key_id not in out and "None" not in out
            out = await asyncio.to_thread(spend, "--ids")
            assert out.splitlines()[0].split()[:4] == ["team", "team_id", "key", "key_id"]
            assert team in out and key_id in out and bound["id"] in out
