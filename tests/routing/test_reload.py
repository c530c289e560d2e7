"""Hot reload: file change, admin call; an invalid file is refused and the old config kept;
requests in flight finish on the config they started with."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.app import create_app
from fleetgate.config.settings import Settings
from tests.conftest import AUTH, MASTER
from tests.fakes import FakeUpstream, Reply


def _write(path: Path, alias: str, up: FakeUpstream) -> None:
    doc = {"models": [{"alias": alias, "deployments": [{"model": "m", "api_base": up.url}]}]}
    path.write_text(yaml.safe_dump(doc))


async def _client(path: Path, tmp_path: Path) -> TestClient[Any, Any]:
    settings = Settings(master_key=MASTER, config_path=path, data_dir=tmp_path)
    client: TestClient[Any, Any] = TestClient(
        TestServer(create_app(settings), handler_cancellation=True)
    )
    await client.start_server()
    return client


async def _aliases(client: TestClient[Any, Any]) -> list[str]:
    data = await (await client.get("/v1/models", headers=AUTH)).json()
    return [m["id"] for m in data["data"]]


async def test_file_change_and_admin_reload(tmp_path: Path, upstream: FakeUpstream) -> None:
    path = tmp_path / "c.yaml"
    _write(path, "one", upstream)
    client = await _client(path, tmp_path)
    try:
        assert await _aliases(client) == ["one"]
        _write(path, "two", upstream)
        for _ in range(40):  # the watcher polls every second
            if await _aliases(client) == ["two"]:
                break
            await asyncio.sleep(0.1)
        assert await _aliases(client) == ["two"]

        path.write_text("models: [{alias: broken}]")
        resp = await client.post("/admin/config/reload", headers=AUTH)
        assert resp.status == 400
        assert "old one is kept" in (await resp.json())["error"]["message"]
        assert await _aliases(client) == ["two"]

        _write(path, "three", upstream)
        resp = await client.post("/admin/config/reload", headers=AUTH)
        assert resp.status == 200
        assert await _aliases(client) == ["three"]
    finally:
        await client.close()


async def test_in_flight_stream_survives_reload(tmp_path: Path, upstream: FakeUpstream) -> None:
    path = tmp_path / "c.yaml"
    _write(path, "one", upstream)
    upstream.queue(Reply(content="a b c d e f g h", chunk_delay=0.05))
    client = await _client(path, tmp_path)
    try:
        body = {"model": "one", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        _write(path, "two", upstream)
        assert (await client.post("/admin/config/reload", headers=AUTH)).status == 200
        text = (await resp.read()).decode()
        assert "[DONE]" in text and '"error"' not in text
    finally:
        await client.close()


async def test_admin_reload_needs_master_key(tmp_path: Path, upstream: FakeUpstream) -> None:
    path = tmp_path / "c.yaml"
    _write(path, "one", upstream)
    client = await _client(path, tmp_path)
    try:
        resp = await client.post("/admin/config/reload")
        assert resp.status == 401
        cfg = await (await client.get("/admin/config", headers=AUTH)).json()
        assert cfg["config"]["models"][0]["alias"] == "one"
    finally:
        await client.close()
