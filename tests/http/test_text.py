"""Text no store can hold (NUL characters, lone surrogates) is a 400 naming where it is, for
every route and on every store, before any handler runs (`fleetgate.http.text`)."""

from __future__ import annotations

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.http.text import check_json_text, unstorable
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream


def test_the_first_nul_in_a_body_is_named_by_its_path() -> None:
    raw = b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}'
    with pytest.raises(InvalidRequest) as caught:
        check_json_text(raw, {"messages": [{"role": "user", "content": "a\x00b"}]})
    assert caught.value.param == "messages[0].content"
    with pytest.raises(InvalidRequest) as caught:
        check_json_text(b'{"tags": {"\\u0000": 1}}', {"tags": {"\x00": 1}})
    assert caught.value.param == "tags.\\u0000"
    # an escaped backslash before "u0000" is no NUL
    check_json_text(b'{"a": "\\\\u0000"}', {"a": "\\u0000"})


def test_lone_surrogates_and_nul_are_unstorable_other_text_is_not() -> None:
    assert unstorable("a\x00") == "NUL characters"
    assert unstorable("a\ud800") == "lone surrogates"
    assert unstorable("é 😀 \u202e") is None


async def test_nul_in_a_body_path_id_or_query_is_400_naming_it(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi\x00"}]}
    cases = [
        ("POST", "/v1/chat/completions", chat, "messages[0].content"),
        ("POST", "/v1/chat/completions", {**chat, "user": "u\x00"}, "messages[0].content"),
        ("GET", "/v1/files/file-x%00", None, "id"),
        ("GET", "/v1/models/tiny%00", None, "model"),
        ("GET", "/v1/files?after=%00", None, "after"),
        ("GET", "/v1/models?a%00b=1", None, "a\\u0000b"),
    ]
    for method, path, body, param in cases:
        resp = await client.request(method, path, json=body, headers=AUTH)
        error = (await resp.json())["error"]
        assert (resp.status, error["param"]) == (400, param), (path, error)
        assert error["type"] == "invalid_request_error" and "NUL" in error["message"]
    assert not any(s.path.endswith("/chat/completions") for s in upstream.seen)


async def test_a_lone_surrogate_in_a_body_is_400_and_a_pair_is_fine(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    lone = b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}'
    pair = b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    headers = {**AUTH, "Content-Type": "application/json"}
    resp = await client.post("/v1/chat/completions", data=lone, headers=headers)
    assert resp.status == 400, await resp.text()
    resp = await client.post("/v1/chat/completions", data=pair, headers=headers)
    assert resp.status == 200, await resp.text()


def test_a_nul_deep_in_a_huge_body_is_refused_without_walking_all_of_it() -> None:
    value = {"a": [{"b": "x"} for _ in range(200_000)] + ["\x00"]}
    raw = b'{"a": [' + b'{"b": "x"}, ' * 200_000 + b'"\\u0000"]}'
    with pytest.raises(InvalidRequest) as caught:
        check_json_text(raw, value)
    assert caught.value.param is None  # the body is named, not searched to its end
