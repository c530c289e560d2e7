"""Fuzzing request bodies: whatever a client sends, the gateway answers 2xx/4xx, never 5xx."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.fuzz_support import RawRequest, assert_answer, authorization, hostile_value, send
from tests.conftest import AUTH, MASTER, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
    st.text(max_size=20),
)  # fmt: skip
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "x", ""]) | json_leaf},
    optional={"content": json_value, "name": json_value, "tool_calls": json_value,
              "tool_call_id": json_value},
)  # fmt: skip
chat_body = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", "other", ""]) | json_leaf},
    optional={
        "messages": st.lists(message, max_size=3) | json_value,
        "stream": json_value, "n": json_value, "max_tokens": json_value,
        "temperature": json_value, "tools": json_value, "tool_choice": json_value,
        "stream_options": json_value, "stop": json_value, "logit_bias": json_value,
        "response_format": json_value, "seed": json_value, "prompt": json_value,
        "input": json_value,
    },
)  # fmt: skip
raw_bytes = st.binary(max_size=64)


async def _post_all(client: Any, path: str, payloads: list[bytes]) -> list[int]:
    statuses = []
    for payload in payloads:
        resp = await client.post(path, data=payload, headers=AUTH)
        await resp.read()
        statuses.append(resp.status)
    return statuses


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    bodies=st.lists(chat_body, min_size=150, max_size=150),
    raws=st.lists(raw_bytes, min_size=30, max_size=30),
)
async def test_no_5xx_for_any_body(
    gateway: GatewayFactory, upstream: FakeUpstream, bodies: list[dict[str, Any]],
    raws: list[bytes],
) -> None:  # fmt: skip
    client = await gateway(one_alias(upstream))
    payloads = [orjson.dumps(b, option=orjson.OPT_NON_STR_KEYS) for b in bodies] + raws
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        statuses = await _post_all(client, path, payloads)
        assert all(s < 500 for s in statuses), sorted(set(statuses))


# Every chat route through raw HTTP, with the keys of every role and the headers the gateway
# reads set to odd values (bytes that are not UTF-8 included).


@dataclass
class Keyed:
    port: int
    keys: dict[str, str]  # role -> key


@pytest.fixture
async def keyed(gateway: GatewayFactory, upstream: FakeUpstream) -> Keyed:
    """Tenancy and conversations on; a team admin key, a user key and a key for another alias."""
    cfg = one_alias(upstream)
    cfg["multimodal"] = {"conversations": {"enabled": True}}
    client = await gateway(cfg)
    team = await (await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)).json()
    keys = {"master": MASTER}
    made = await client.post("/admin/users", json={"team": team["id"], "name": "u1"}, headers=AUTH)
    assert made.status == 201, await made.text()
    user_id = (await made.json())["id"]
    for role, body in {
        "team_admin": {"role": "team_admin"},
        "user": {"user": user_id},
        "other_alias": {"aliases": ["other"]},
    }.items():
        resp = await client.post("/admin/keys", json={"team": team["id"], **body}, headers=AUTH)
        assert resp.status == 201, await resp.text()
        keys[role] = (await resp.json())["key"]
    port = client.server.port
    assert port is not None
    return Keyed(port, keys)


ODD_HEADER_VALUES = [b"", b"x" * 4000, b"\xff\xfe", b"\xc3\xa9", b"..", b"a b", b"-1", b"prompt"]
# What a header value may hold on the wire (HTTP's field-vchar and obs-text): control characters
# are refused by the HTTP parser itself, before the application sees the request.
FIELD_CHARS = st.characters(exclude_categories=["Cc", "Cs"])
READ_HEADERS = [
    b"x-conversation-id", b"x-user-id", b"x-session-id", b"x-request-id", b"x-fleetgate-debug",
    b"anthropic-version", b"anthropic-beta", b"x-stainless-lang",
]  # fmt: skip


@st.composite
def odd_headers(draw: st.DrawFn, keys: dict[str, str], path: str) -> list[tuple[bytes, bytes]]:
    headers = draw(authorization(keys))
    if path.startswith("/v1/messages") and headers and draw(st.booleans()):
        # the Anthropic SDKs send the key as x-api-key
        value = headers.pop()[1]
        headers.append((b"x-api-key", value.removeprefix(b"Bearer ")))
    for name in draw(st.lists(st.sampled_from(READ_HEADERS), max_size=3, unique=True)):
        value = draw(
            st.sampled_from(ODD_HEADER_VALUES) | st.text(FIELD_CHARS, max_size=12).map(str.encode)
        )
        headers.append((name, value))
    headers.append((b"Content-Type", b"application/json"))
    return headers


text_block = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=12)})
anthropic_block = st.one_of(
    text_block,
    st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}),
    st.just({"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:1/x.png"}}),
    st.just({"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": "JVBE"}}),
    st.just({"type": "tool_result", "tool_use_id": "t1", "content": "ok"}),
    st.just({"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}),
    st.just({"type": "thinking", "thinking": "hm", "signature": "s"}),
    hostile_value,
)  # fmt: skip
anthropic_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]) | hostile_value},
    optional={"content": st.text(max_size=12) | st.lists(anthropic_block, max_size=3)
              | hostile_value},
)  # fmt: skip
MESSAGES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["tiny", "other", "", "x" * 300]),
    "max_tokens": st.sampled_from([16, 0, -1, 2**31, 2**63, 1.5, "16", True]),
    "messages": st.lists(anthropic_message, max_size=3),
    "system": st.sampled_from(["be brief", [{"type": "text", "text": "s"}], 5, [{"type": "x"}]]),
    "stream": st.sampled_from([False, True, "yes"]),
    "temperature": st.sampled_from([0.5, -1, "x", 1e308]),
    "top_k": st.sampled_from([5, -1, "x"]),
    "stop_sequences": st.sampled_from([["x"], "abc", 5, [5], [None], {}]),
    "tools": st.sampled_from(
        [
            [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            [{}],
            "x",
            [{"name": 5, "input_schema": {}}],
            [{"type": "web_search_20250305", "name": "w"}],
        ]
    ),  # fmt: skip
    "tool_choice": st.sampled_from(
        [
            {"type": "auto"},
            {"type": "tool", "name": "f"},
            {"type": "any"},
            {"type": "none"},
            "auto",
            {"type": "x"},
            5,
            {"type": "tool"},
        ]
    ),  # fmt: skip
    "metadata": st.sampled_from([{"user_id": "u"}, 5, {"user_id": 5}, []]),
    "output_config": st.sampled_from(
        [
            {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            [],
            5,
            {"format": 5},
            "x",
        ]
    ),  # fmt: skip
    "thinking": st.sampled_from([{"type": "enabled", "budget_tokens": 100}, 5]),
}


@st.composite
def messages_body(draw: st.DrawFn) -> Any:
    """A valid Anthropic request with some fields replaced by odd or hostile values."""
    body: dict[str, Any] = {
        "model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
    }  # fmt: skip
    for name in draw(st.lists(st.sampled_from(sorted(MESSAGES_FIELDS)), max_size=4)):
        pick = draw(st.integers(0, 5))
        if pick == 0:
            body.pop(name, None)
        else:
            body[name] = draw(MESSAGES_FIELDS[name] if pick < 5 else hostile_value)
    return body if draw(st.integers(0, 9)) else draw(hostile_value)


VALID_OPENAI = {
    "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "input": "hi",
    "prompt": "hi", "max_tokens": 8,
}  # fmt: skip


def _encode(body: Any) -> bytes:
    return json.dumps(body, allow_nan=False).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_no_5xx_from_any_messages_request(keyed: Keyed, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(["/v1/messages", "/v1/messages", "/v1/messages/count_tokens"]))
    body = _encode(data.draw(messages_body()))
    request = RawRequest("POST", path.encode(), data.draw(odd_headers(keyed.keys, path)), body)
    assert_answer(request, await send(keyed.port, request), anthropic=True)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_no_5xx_from_any_key_or_header_on_the_openai_routes(
    keyed: Keyed, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]))
    body = data.draw(chat_body)
    if data.draw(st.booleans()):  # a valid body with one or two fields changed: the stages run
        keep = data.draw(st.lists(st.sampled_from(sorted(body)), max_size=2, unique=True))
        body = {**VALID_OPENAI, "stream": data.draw(st.booleans()), **{k: body[k] for k in keep}}
    request = RawRequest(
        "POST", path.encode(), data.draw(odd_headers(keyed.keys, path)),
        orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
    )  # fmt: skip
    assert_answer(request, await send(keyed.port, request))
