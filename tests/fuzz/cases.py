"""Bad inputs for every route of a running gateway, generated from its router.

`route_cases` walks ``app.router`` (so a route added later is fuzzed without touching this
file), fills each path parameter with a real value or a hostile one, and for each route and
method yields a deterministic list of requests (seeded by the route): malformed JSON, NUL
characters and lone surrogates in every place a caller controls, huge and deeply nested values,
wrong types. Each request is raw HTTP/1.1 (`tests.api.fuzz_support.RawRequest`), so bytes no
client library would send reach the gateway as they are.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.api.fuzz_support import RawRequest

__all__ = ["Case", "Ids", "route_cases", "routes_of"]

NUL = "a\x00b"
SURROGATE = "a\ud800b"  # a lone surrogate: JSON allows its escape, UTF-8 cannot hold it

# Path segments as they go on the wire.
BAD_SEGMENTS = [
    b"%00", b"x%00y", b"%ED%A0%80", b"%ff%fe", b"a" * 3000, b"..", b"%2F", b"%C3%A9", b"-1",
]  # fmt: skip

# Query values as they go on the wire.
BAD_QUERY_VALUES = [
    b"%00", b"x%00", b"%ED%A0%80", b"%ff", b"-1", b"1e400", b"nan", b"9" * 40, b"x" * 4000,
    b"", b"2024-13-45", b"true,false",
]  # fmt: skip
QUERY_NAMES = [
    "limit", "after", "before", "order", "team", "since", "until", "group_by", "kind", "alias",
    "key_id", "flagged", "purpose", "page", "model", "window_s", "deployment", "tenant", "user",
    "status", "include",
]  # fmt: skip

# A field value of each wrong kind, and the huge and deep ones.
WRONG_TYPES: list[Any] = [
    None, True, 0, -1, 2**64, 1e308, -1e308, 1.5, "", "x", [], [1, "a"], {}, {"a": None},
]  # fmt: skip
HUGE_STRING = "x" * 300_000
DEEP_ARRAY = "[" * 2000 + "]" * 2000  # past orjson's own limit too
DEEP_OBJECT = '{"a":' * 200 + "1" + "}" * 200
MANY_VALUES = b'{"x": [' + b'{"b": 1}, ' * 100_000 + b"1]}"  # 1 MiB of small objects

# Headers the gateway reads and may store, with values that are not UTF-8 (control characters
# never get past the HTTP parser).
READ_HEADERS = [
    b"x-request-id", b"x-user-id", b"x-session-id", b"x-conversation-id", b"x-fleetgate-debug",
    b"x-fleetgate-priority", b"x-fleetgate-ttft-deadline-ms", b"anthropic-version",
]  # fmt: skip
ODD_HEADER_VALUES = [b"\xff\xfe", b"\xed\xa0\x80", b"x" * 4000, b"\xc3\xa9 %00"]

RAW_BODIES = [
    b"{", b"[]", b"null", b"1e400", b'{"a":1e400}', b"\xff\xfe{}", b'{"a":"\xff"}', b"{}",
    b'{"a":NaN}', b'{"a":1,"a":2}', b'"\\u0000"', DEEP_ARRAY.encode(), DEEP_OBJECT.encode(),
    b'{"model": "\\ud800"}', b'{"name": "\\udfff\\ud800"}', b'{"\\u0000": 1}', MANY_VALUES,
]  # fmt: skip


@dataclass(frozen=True)
class Ids:
    """Real values a path parameter can take, by name (and for ``id``, by collection)."""

    params: Mapping[str, str]
    ids: Mapping[str, str]  # "files" -> a file id, "batches" -> ..., "responses" -> ...

    def real(self, path: str, name: str) -> str:
        if name == "id":
            collection = path.split("/")[2] if path.count("/") >= 2 else ""
            return self.ids.get(collection, "x")
        return self.params.get(name, "x")


@dataclass(frozen=True)
class Case:
    label: str  # "METHOD /template #n: what"
    request: RawRequest


def routes_of(app: web.Application) -> list[tuple[str, str]]:
    """(method, path template) of every route, HEAD left out (its GET is fuzzed); a route for
    any method (``*``) is fuzzed with GET and POST."""
    out: list[tuple[str, str]] = []
    for route in app.router.routes():
        resource = route.resource
        if resource is None or route.method == "HEAD":
            continue
        info = resource.get_info()
        template = info.get("formatter") or info.get("path") or info.get("prefix")
        if not isinstance(template, str):
            continue
        methods = ["GET", "POST"] if route.method == "*" else [route.method]
        out += [(m, template) for m in methods if (m, template) not in out]
    return out


def _params(template: str) -> list[str]:
    return [p[1:-1].split(":")[0] for p in template.split("/") if p.startswith("{")]


def _path(template: str, ids: Ids, bad: dict[str, bytes] | None = None) -> bytes:
    out = []
    for part in template.split("/"):
        if part.startswith("{"):
            name = part[1:-1].split(":")[0]
            if bad and name in bad:
                out.append(bad[name])
                continue
            out.append(quote(ids.real(template, name), safe="").encode())
        else:
            out.append(part.encode())
    return b"/".join(out)


def _dumps(value: Any) -> bytes:
    # json (not orjson) so lone surrogates go out as their \\ud800 escape, as a client sends
    return json.dumps(value, allow_nan=False).encode()


def _strings_replaced(value: Any, text: str) -> Any:
    """``value`` with every string in it (keys kept) replaced by ``text``."""
    if isinstance(value, str):
        return text
    if isinstance(value, list):
        return [_strings_replaced(v, text) for v in value]
    if isinstance(value, dict):
        return {k: _strings_replaced(v, text) for k, v in value.items()}
    return value


def _bodies(valid: dict[str, Any], rng: random.Random) -> Iterator[tuple[str, bytes]]:
    yield "valid", _dumps(valid)
    yield "empty", b""
    for i, raw in enumerate(RAW_BODIES):
        yield f"raw{i}", raw
    yield "nul everywhere", _dumps(_strings_replaced(valid, NUL))
    yield "surrogate everywhere", _dumps(_strings_replaced(valid, SURROGATE))
    yield "huge strings", _dumps(_strings_replaced(valid, HUGE_STRING))
    fields = sorted(valid)
    for name in fields:  # one field at a time: the others valid, so the code behind runs
        hostile = rng.choice([NUL, SURROGATE, *WRONG_TYPES, HUGE_STRING])
        yield f"{name}={str(hostile)[:20]!r}", _dumps({**valid, name: hostile})
        yield f"{name}=nul", _dumps({**valid, name: _strings_replaced(valid[name], NUL)})
        deep: Any = valid[name]
        for _ in range(150):
            deep = [deep]
        yield f"{name}=deep", _dumps({**valid, name: deep})
    yield "nul key", _dumps({**valid, NUL: 1})


def _query(rng: random.Random) -> bytes:
    pairs = []
    for _ in range(rng.randint(1, 4)):
        name = rng.choice(QUERY_NAMES).encode()
        pairs.append(name + b"=" + rng.choice(BAD_QUERY_VALUES))
    return b"&".join(pairs)


MULTIPART = "fuzzboundary"


def _multipart(fields: dict[str, str], filename: str) -> bytes:
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{MULTIPART}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        )
    parts.append(
        f'--{MULTIPART}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
        '{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": '
        '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}}\n\r\n'
    )
    parts.append(f"--{MULTIPART}--\r\n")
    return "".join(parts).encode("utf-8", "surrogatepass")


MULTIPART_BODIES = [
    ("multipart valid", {"purpose": "batch", "model": "tiny"}, "in.jsonl"),
    ("multipart nul", {"purpose": NUL, "model": NUL}, NUL),
    ("multipart surrogate", {"purpose": SURROGATE, "model": SURROGATE}, SURROGATE),
    ("multipart huge", {"purpose": "x" * 5000, "model": "x" * 5000}, "x" * 5000),
]


# Console form fields, and the form bodies a signed-in browser could post.
FORM_FIELDS = [
    "name", "team", "key", "key_id", "alias", "weights", "rpm", "tpm", "max_parallel",
    "max_budget_usd", "budget_period", "tags", "sticky", "force", "version", "stage", "expected",
    "model", "content", "aliases", "role", "user", "on", "next", "page", "v1", "v2",
]  # fmt: skip
FORM_VALUES = [b"%00", b"a%00b", b"%ED%A0%80", b"%ff", b"x" * 5000, b"-1", b"1e400", b"nan", b""]


def _forms(rng: random.Random, ids: Ids) -> Iterator[tuple[str, bytes]]:
    def encode(fields: dict[str, bytes]) -> bytes:
        return b"&".join(k.encode() + b"=" + v for k, v in fields.items())

    valid = {f: quote(ids.params.get(f, "1"), safe="").encode() for f in FORM_FIELDS}
    yield "form valid", encode(valid)
    for value in FORM_VALUES:
        yield f"form all={value[:8]!r}", encode(dict.fromkeys(FORM_FIELDS, value))
    for _ in range(6):
        name, value = rng.choice(FORM_FIELDS), rng.choice(FORM_VALUES)
        yield f"form {name}={value[:8]!r}", encode({**valid, name: value})


def route_cases(
    method: str,
    template: str,
    ids: Ids,
    keys: list[str],
    valid: dict[str, Any],
    session: list[tuple[bytes, bytes]] | None = None,
) -> list[Case]:
    """The requests for one route and method; ``keys`` are the API keys to send (in turn),
    ``valid`` a valid body for it (``{}`` when it reads none), ``session`` headers of a signed-in
    console session (its cookie and CSRF token: form bodies are sent too)."""
    rng = random.Random(f"{method} {template}")
    cases: list[tuple[str, bytes, bytes, bytes]] = []  # label, path+query, body, content type
    json_type = b"application/json"
    path = _path(template, ids)
    for name in _params(template):
        for segment in BAD_SEGMENTS:
            cases.append((f"{{{name}}}={segment[:12]!r}", _path(template, ids, {name: segment}),
                          _dumps(valid) if valid else b"", json_type))  # fmt: skip
    for _ in range(4):
        query = _query(rng)
        cases.append((f"query {query[:60]!r}", path + b"?" + query, b"", json_type))
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        for label, body in _bodies(valid, rng):
            cases.append((label, path, body, json_type))
        if method == "POST" and session:
            form_type = b"application/x-www-form-urlencoded"
            cases += [(label, path, body, form_type) for label, body in _forms(rng, ids)]
        if method == "POST":
            for label, fields, filename in MULTIPART_BODIES:
                content_type = f"multipart/form-data; boundary={MULTIPART}".encode()
                cases.append((label, path, _multipart(fields, filename), content_type))
    out = []
    for n, (label, target, body, content_type) in enumerate(cases):
        key = keys[n % len(keys)]
        headers = [(b"Authorization", b"Bearer " + key.encode()), (b"Content-Type", content_type)]
        request = RawRequest(method, target, headers + (session or []), body)
        out.append(Case(f"{method} {template} #{n}: {label}", request))
    body = _dumps(valid) if valid and method != "GET" else b""
    for n, value in enumerate(ODD_HEADER_VALUES, start=len(out)):
        headers = [
            (b"Authorization", b"Bearer " + keys[n % len(keys)].encode()),
            (b"Content-Type", b"application/json"),
            *((h, value) for h in READ_HEADERS),
        ]
        request = RawRequest(method, path, headers, body)
        out.append(Case(f"{method} {template} #{n}: headers {value[:12]!r}", request))
    return out
