"""The pipeline's admin API and CLI refuse bad input with OpenAI-style 4xx answers and show a
run's timeline (no engines launched: the model's pipeline is not automatic)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fleetgate.cli.main import main as cli_main
from tests.releases.support import MASTER, Gateway, registry_config, running_gateway, version_body


async def start(gw: Gateway, model: str, version: str) -> tuple[int, Any]:
    return await gw.admin("POST", "/admin/pipelines", json={"model": model, "version": version})


async def test_start_and_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = registry_config("http://127.0.0.1:9")
    cfg["pipelines"] = {"tick_s": 60, "models": {"chat": {"alias": "chat", "auto": False}}}
    async with running_gateway(cfg, tmp_path, None) as gw:
        await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
        await gw.admin("POST", "/admin/registry/models/chat/versions",
                       json=version_body("http://127.0.0.1:9", 1))  # fmt: skip
        status, body = await start(gw, "tiny", "v1")
        assert status == 400 and body["error"]["param"] == "model"
        status, body = await gw.admin("POST", "/admin/pipelines", json={"model": "chat"})
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        status, body = await start(gw, "chat", "v9")
        assert status == 404
        status, body = await start(gw, "chat", "v1")
        assert status == 201 and body["status"] == "running" and body["steps"] == []
        status, body = await start(gw, "chat", "v1")
        assert status == 409 and body["error"]["code"] == "pipeline_exists"
        status, body = await gw.admin("GET", "/admin/pipelines", key="sk-not-master")
        assert status == 401
        assert (await gw.admin("GET", "/admin/pipelines/chat/v2"))[0] == 404
        common = ["--url", gw.url, "--key", MASTER]
        code = await asyncio.to_thread(cli_main, ["pipeline", "status", *common, "-o", "json"])
        runs = json.loads(capsys.readouterr().out)
        assert code == 0 and [(r["version"], r["status"]) for r in runs] == [("v1", "running")]
        code = await asyncio.to_thread(cli_main, ["pipeline", "status", "chat", "v1", *common])
        assert code == 0 and "running" in capsys.readouterr().out
        code = await asyncio.to_thread(cli_main, ["pipeline", "status", "chat", "v7", *common])
        assert code == 2 and "no pipeline run" in capsys.readouterr().err
