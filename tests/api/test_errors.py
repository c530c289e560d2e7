"""Every client mistake is a 4xx OpenAI error object, never a 500."""

from __future__ import annotations

import pytest

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream, Status


def _is_error(data: dict[str, object]) -> bool:
    err = data.get("error")
    return isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (b"", 400, None),
        (b'{"model": "tiny"}', 400, "messages"),
        (b'{"model": "tiny", "messages": []}', 400, "messages"),
        (b'{"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}', 400, None),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 0}', 400, "n"),
        (b'{"model": "tiny", "messages": [{"role": "user"}], "temperature": 9}', 400, None),
        (b'{"model": "tiny", "messages": [{"role": "user"}], "stream": "yes"}', 400, "stream"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "model"),
    ],
)
async def test_bad_requests(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    body: bytes,
    status: int,
    param: str | None,
) -> None:
    client = await gateway(one_alias(upstream))
    resp = await client.post("/v1/chat/completions", data=body, headers=AUTH)
    assert resp.status == status
    data = await resp.json()
    assert _is_error(data)
    if param is not None:
        assert data["error"]["param"] == param
    assert not upstream.seen


async def test_auth_errors(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        resp = await client.post("/v1/chat/completions", json=body, headers=headers)
        assert resp.status == 401
        assert (await resp.json())["error"]["type"] == "authentication_error"


async def test_body_too_large(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    cfg = one_alias(upstream)
    cfg["server"] = {"max_request_bytes": 1000}
    client = await gateway(cfg)
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 5000}]}
    resp = await client.post("/v1/chat/completions", json=big, headers=AUTH)
    assert resp.status == 413
    assert _is_error(await resp.json())


async def test_unknown_route_and_method(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    client = await gateway(one_alias(upstream))
    resp = await client.get("/v1/nothing-here")
    assert resp.status == 404 and _is_error(await resp.json())
    resp = await client.get("/v1/chat/completions", headers=AUTH)
    assert resp.status == 405 and _is_error(await resp.json())


async def test_upstream_client_error_keeps_its_status(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    upstream.queue(Status(400, message="bad logit_bias"))
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 400
    assert (await resp.json())["error"]["message"] == "bad logit_bias"
    assert len(upstream.seen) == 1  # a 400 is not retried


async def test_upstream_errors_never_show_the_upstream_url_or_its_credentials(
    gateway: GatewayFactory,
) -> None:
    secret_base = "http://svc-user:hunter2secret@internal-engine.invalid:9/v1"
    dead = {"provider": "openai", "model": "m", "api_base": secret_base, "name": "dead"}
    local = {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1", "name": "d2"}
    client = await gateway({
        "models": [{"alias": "tiny", "deployments": [dead]},
                   {"alias": "local", "deployments": [local]}],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01, "num_retries": 0},
    })  # fmt: skip
    for alias in ("tiny", "local"):
        for stream in (False, True):
            body = {"model": alias, "stream": stream,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
            resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
            text = await resp.text()
            assert resp.status >= 500
            for leak in ("hunter2secret", "svc-user", "internal-engine", "127.0.0.1:9", "/v1"):
                assert leak not in text, (alias, stream, text)
