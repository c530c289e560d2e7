"""Fuzzing the admin API: whatever method, path, query, headers and body a caller sends, with the
master key, a team admin key, a user key or none, the answer is 2xx/4xx (an OpenAI error object),
never a 5xx and never a hang.

Each request starts from a valid one for its route (so it reaches the code behind the
validation) and has some of its parts replaced by hostile values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgate.api.state import GATEWAY
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.prompt.retrieval import DocumentIndex
from tests.api.fuzz_support import (
    HashEmbedder,
    RawRequest,
    assert_answer,
    authorization,
    hostile_text,
    hostile_value,
    path_segment,
    send,
)
from tests.conftest import MASTER, GatewayFactory
from tests.fakes import FakeUpstream

METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]


@dataclass(frozen=True)
class Route:
    """A route, and a valid body and query values for it (``{team}`` etc. filled in)."""

    template: str
    methods: str
    body: dict[str, Any] | None = None
    query: dict[str, list[str]] = field(default_factory=dict)


_KEY_BODY = {
    "team": "{team}", "role": "user", "aliases": ["tiny"], "user": None, "rpm": 60, "tpm": 10_000,
    "max_parallel": 4, "max_budget_usd": 12.5, "budget_period": "daily", "tags": {"app": "x"},
    "expires_at": "2100-01-01T00:00:00Z",
}  # fmt: skip
_POLICY_BODY = {
    "input": ["words"], "output": ["pii"], "stream": ["words"], "audit": [],
    "actions": {"words": "block"}, "canned_reply": "no",
    "stream_options": {"interval_tokens": 20, "hold_back": True},
}  # fmt: skip
_TIME = ["0", "1700000000", "2024-01-01", "2024-01-01T00:00:00+02:00", "4102444800"]
ROUTES = [
    Route(
        "/admin/teams",
        "GET POST",
        {
            "name": "t",
            "rpm": 10,
            "tpm": 1000,
            "max_parallel": 2,
            "max_budget_usd": 5,
            "budget_period": "monthly",
            "log_payloads": False,
            "tags": {"a": "b"},
        },
    ),  # fmt: skip
    Route("/admin/teams/{team}", "GET"),
    Route("/admin/users", "POST", {"team": "{team}", "name": "u"}),
    Route("/admin/keys", "GET POST", _KEY_BODY, {"team": ["{team}"]}),
    Route("/admin/keys/{key}", "DELETE"),
    Route(
        "/admin/spend",
        "GET",
        None,
        {
            "group_by": ["team", "alias,key", "tag", "deployment,version", "team,alias,key,tag"],
            "since": _TIME,
            "until": _TIME,
            "team": ["{team}"],
        },
    ),  # fmt: skip
    Route("/admin/audit", "GET", None, {"kind": ["admin", "request"], "limit": ["1", "50"]}),
    Route("/admin/config", "GET"),
    Route("/admin/config/reload", "POST", {}),
    Route("/admin/safety/policies", "GET"),
    Route("/admin/safety/policies/{policy}", "GET PUT", _POLICY_BODY),
    Route("/admin/safety/aliases/{alias}", "PUT DELETE", {"policy": "strict"}),
    Route("/admin/safety/teams/{team}", "PUT DELETE", {"policy": "default"}),
    Route(
        "/admin/safety/audit",
        "GET",
        None,
        {
            "limit": ["1", "10"],
            "key_id": ["{key}"],
            "flagged": ["true", "false"],
        },
    ),  # fmt: skip
    Route(
        "/admin/aliases/{alias}/split",
        "GET PUT DELETE",
        {
            "weights": {"v1": 90, "v2": 10},
            "sticky": True,
            "revision": 3,
            "updated_at": 1.5,
        },
    ),  # fmt: skip
    Route("/admin/splits", "GET"),
    Route(
        "/admin/routing/decisions",
        "GET",
        None,
        {
            "alias": ["chat"],
            "deployment": ["chat-v1"],
            "reason": ["prefix-hit"],
            "tenant": ["{team}"],
            "since": ["0", "1700000000.5"],
            "limit": ["1", "20"],
        },
    ),  # fmt: skip
    Route("/admin/routing/engines", "GET"),
    Route("/admin/teams/{team}/documents/{doc}", "PUT DELETE", {"text": "Vacation: 27 days."}),
]


@dataclass
class Fuzzed:
    """The running gateway and the real names a request can aim at."""

    port: int
    keys: dict[str, str]  # role -> key
    names: dict[str, list[str]]  # path parameter -> real values


def _config(up: FakeUpstream) -> dict[str, Any]:
    deployments = [
        {"provider": "openai", "model": "m", "api_base": up.url, "name": f"chat-{v}", "version": v}
        for v in ("v1", "v2")
    ]
    return {
        "models": [
            {"alias": "chat", "strategy": "kv-aware", "deployments": deployments},
            {"alias": "tiny", "deployments": [{"model": "m", "api_base": up.url}]},
        ],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "safety": {
            "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
            "policies": {"default": {"input": ["words"]}, "strict": {"input": ["words", "pii"]}},
        },
        "multimodal": {"prompts": {"tiny": {"retrieval": {"top_k": 1}}}},
    }


@pytest.fixture
async def fuzzed(
    gateway: GatewayFactory, upstream: FakeUpstream, database_url: str | None
) -> Fuzzed:
    """A gateway with tenancy, safety, canary versions, kv-aware routing and retrieval, a team
    with a team admin key and a user key, another team, and one document."""
    client = await gateway(_config(upstream), database_url=database_url)
    runtime = client.app[GATEWAY].core.ports.require(MULTIMODAL)
    assert runtime is not None
    inputs = runtime.inputs  # the same bounds as the index it replaces
    runtime.index = DocumentIndex(
        HashEmbedder(),
        max_team_bytes=inputs.team_document_bytes,
        max_team_documents=inputs.team_documents,
    )
    master = {"Authorization": f"Bearer {MASTER}"}

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = await client.post(path, json=body, headers=master)
        assert resp.status == 201, await resp.text()
        out: dict[str, Any] = await resp.json()
        return out

    team = await post("/admin/teams", {"name": "fuzz"})
    other = await post("/admin/teams", {"name": "other"})
    admin = await post("/admin/keys", {"team": team["id"], "role": "team_admin"})
    user = await post("/admin/keys", {"team": team["id"], "aliases": ["tiny"]})
    spare = await post("/admin/keys", {"team": other["id"]})  # the one DELETE may revoke
    doc = await client.put(
        f"/admin/teams/{team['id']}/documents/handbook", json={"text": "Vacation: 27 days."},
        headers=master,
    )  # fmt: skip
    assert doc.status == 200, await doc.text()
    port = client.server.port
    assert port is not None
    return Fuzzed(
        port=port,
        keys={"master": MASTER, "team_admin": admin["key"], "user": user["key"]},
        names={
            "team": [team["id"], other["id"], "fuzz"],
            "key": [spare["id"], "key_0000000000000000"],
            "policy": ["default", "strict", "new"],
            "alias": ["chat", "tiny"],
            "doc": ["handbook", "other"],
        },
    )


def _fill(draw: st.DrawFn, value: Any, names: dict[str, list[str]]) -> Any:
    """``value`` with each ``{name}`` string replaced by a real name."""
    if isinstance(value, str) and value.startswith("{") and value[1:-1] in names:
        return draw(st.sampled_from(names[value[1:-1]]))
    return value


def _segment(draw: st.DrawFn, real: list[str]) -> bytes:
    if draw(st.integers(0, 3)):
        return quote(draw(st.sampled_from(real)), safe="").encode()
    return draw(path_segment).encode()


def _mutated(draw: st.DrawFn, valid: dict[str, Any], names: dict[str, list[str]]) -> Any:
    """A valid object with some entries dropped, replaced by hostile values or added."""
    out = {k: _fill(draw, v, names) for k, v in valid.items()}
    for name in draw(st.lists(st.sampled_from(sorted(valid)), max_size=3)) if valid else []:
        out[name] = draw(hostile_value | st.just(None))
    for name in draw(st.lists(st.sampled_from(sorted(valid)), max_size=2)) if valid else []:
        out.pop(name, None)
    if draw(st.integers(0, 4)) == 0:
        out[draw(hostile_text)] = draw(hostile_value)
    return out


def _body(draw: st.DrawFn, route: Route, names: dict[str, list[str]]) -> bytes:
    kind = draw(st.sampled_from(["valid", "mutated", "mutated", "mutated", "any", "raw", "none"]))
    if kind == "none":
        return b""
    if kind == "raw":
        return draw(st.binary(max_size=64) | st.sampled_from([b"[]", b"1e400", b"{", b"null"]))
    valid = route.body or {}
    if kind == "any":
        value = draw(hostile_value)
    elif kind == "valid":
        value = {k: _fill(draw, v, names) for k, v in valid.items()}
    else:
        value = _mutated(draw, valid, names)
    return json.dumps(value, ensure_ascii=draw(st.booleans()), allow_nan=False).encode()


def _query(draw: st.DrawFn, route: Route, names: dict[str, list[str]]) -> bytes:
    pairs = [
        (k, _fill(draw, draw(st.sampled_from(v)), names))
        for k, v in route.query.items()
        if draw(st.booleans())
    ]
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(pairs)))
        name = draw(st.sampled_from(sorted(route.query)) | hostile_text) if route.query else ""
        pairs.insert(index, (name or draw(hostile_text), draw(hostile_text)))  # repeats too
    return b"&".join(quote(k, safe="").encode() + b"=" + quote(v, safe=",").encode()
                     for k, v in pairs)  # fmt: skip


@st.composite
def admin_request(draw: st.DrawFn, ctx: Fuzzed) -> RawRequest:
    route = draw(st.sampled_from(ROUTES))
    method = draw(st.sampled_from(route.methods.split()) | st.sampled_from(METHODS))
    path = route.template.encode()
    for param, real in ctx.names.items():
        marker = b"{" + param.encode() + b"}"
        if marker in path:
            path = path.replace(marker, _segment(draw, real))
    query = _query(draw, route, ctx.names)
    if query:  # within the 8 KiB request line (past it the HTTP parser answers, not the app)
        path += b"?" + query[: 8000 - len(path)]
    headers = draw(authorization(ctx.keys))
    headers.append((b"Content-Type", draw(st.sampled_from(
        [b"application/json", b"text/plain", b"application/json; charset=latin-1", b"x/\xff"]
    ))))  # fmt: skip
    return RawRequest(method, path, headers, _body(draw, route, ctx.names))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_no_5xx_from_any_admin_request(fuzzed: Fuzzed, data: st.DataObject) -> None:
    request = data.draw(admin_request(fuzzed))
    assert_answer(request, await send(fuzzed.port, request))
