"""The serving model's registered name and the filing number on every answer of an alias
(JSON, streamed, refused), public at GET /disclosure, changed by a reload; absent section: off."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from fleetgate.api.state import GATEWAY
from fleetgate.config.schema import GatewayConfig
from fleetgate.disclosure.feature import MODEL_HEADER, NUMBER_HEADER, header_value
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

ZH_NUMBER = "网信算备110108000000000000001号"


def _config(upstream: FakeUpstream, **disclosure: Any) -> dict[str, Any]:
    config = one_alias(upstream, alias="chat")
    config["models"].append({**config["models"][0], "alias": "chat-zh"})
    config["disclosure"] = {
        "model_name": "Acme Assistant", "filing_number": "Beijing-Acme-20240101",
        "aliases": {"chat-zh": {"model_name": "Acme 中文助手", "filing_number": ZH_NUMBER}},
        **disclosure,
    }  # fmt: skip
    return config


def _decode(value: str) -> str:
    return unquote(value.removeprefix("UTF-8''"))


async def test_every_answer_carries_the_aliass_name_and_number(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert resp.headers[MODEL_HEADER] == "Acme Assistant"
    assert resp.headers[NUMBER_HEADER] == "Beijing-Acme-20240101"
    resp = await client.post("/v1/chat/completions", headers=AUTH,
                             json={**body, "model": "chat-zh", "stream": True})  # fmt: skip
    assert resp.status == 200 and "data:" in await resp.text()
    assert _decode(resp.headers[MODEL_HEADER]) == "Acme 中文助手"
    assert _decode(resp.headers[NUMBER_HEADER]) == ZH_NUMBER
    assert resp.headers[NUMBER_HEADER].isascii()
    # a refused answer carries them too: the upstream fails and no other deployment is left
    upstream.healthy = False
    upstream.script.extend([500, 500, 500])
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status >= 500 and resp.headers[MODEL_HEADER] == "Acme Assistant"


async def test_the_list_is_public_and_a_reload_changes_it(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    resp = await client.get("/disclosure")  # no key: shown to everyone
    assert resp.status == 200
    rows = {r["alias"]: r for r in (await resp.json())["data"]}
    assert rows["chat-zh"]["filing_number"] == ZH_NUMBER
    assert rows["chat"]["model_name"] == "Acme Assistant"
    tables = client.app[GATEWAY].tables
    new = GatewayConfig.model_validate(_config(upstream, filing_number="Beijing-Acme-20250202"))
    tables.apply(new)
    assert "disclosure.filing_number" in tables.change.applied
    assert not tables.change.restart_required
    body = {"model": "chat", "messages": [{"role": "user", "content": "x"}]}
    resp = await client.post("/v1/chat/completions", headers=AUTH, json=body)
    assert resp.headers[NUMBER_HEADER] == "Beijing-Acme-20250202"


async def test_a_reload_without_the_section_stops_the_headers_at_once(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    assert (
        MODEL_HEADER in (await client.post("/v1/chat/completions", json=body, headers=AUTH)).headers
    )
    config = _config(upstream)
    del config["disclosure"]
    client.app[GATEWAY].tables.apply(GatewayConfig.model_validate(config))
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert MODEL_HEADER not in resp.headers and NUMBER_HEADER not in resp.headers
    rows = (await (await client.get("/disclosure")).json())["data"]
    assert rows == []  # nothing listed either


async def test_without_the_section_nothing_is_added(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream, alias="chat"))
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200 and MODEL_HEADER not in resp.headers
    assert (await client.get("/disclosure")).status == 404


def test_header_values_are_ascii() -> None:
    assert header_value("Acme") == "Acme"
    assert header_value("中文").startswith("UTF-8''%E4")
    assert header_value("a\nb").startswith("UTF-8''")  # no header injection
