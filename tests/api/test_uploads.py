"""Uploads are bounded while they are read: the whole body after decompression, the number of
parts, each field, the file, and the request's limits apply before the file is read."""

from __future__ import annotations

import gzip
import io
from typing import Any

import aiohttp
import numpy as np
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import RateLimited
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

BOUNDARY = "fleetgate-test-boundary"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **AUTH}


def _config(up: FakeUpstream, **multimodal: Any) -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["tenancy"] = {"enabled": False}
    if multimodal:
        cfg["multimodal"] = multimodal
    return cfg


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


def _body(*parts: bytes, preamble: bytes = b"") -> bytes:
    return preamble + b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def _wav(seconds: float = 0.5) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(16000 * seconds), np.float32), 16000, format="WAV")
    return buf.getvalue()


async def _error(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    body = await resp.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


async def test_a_gzipped_upload_that_inflates_past_the_cap_is_413_while_it_is_read(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    # ~60 MB of blank preamble lines compress to well under 100 KB.
    preamble = b"x" * 998 + b"\r\n"
    inflated = _body(_part("model", b"whisper-1"), preamble=preamble * 60_000)
    compressed = gzip.compress(inflated, 9)
    assert len(compressed) < 200_000 and len(inflated) > 60_000_000
    client = await gateway(_config(upstream))
    resp = await client.post(
        "/v1/audio/transcriptions",
        data=compressed,
        headers={**MULTIPART, "Content-Encoding": "gzip"},
    )
    assert resp.status == 413
    err = await _error(resp)
    assert err["code"] == "upload_too_large" and "after decompression" in err["message"]


async def test_an_upload_of_many_small_fields_is_refused_at_the_part_limit(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    fields = [_part(f"f{i}", b"v" * 100) for i in range(1_500)]
    body = _body(_part("model", b"whisper-1"), *fields, _part("file", _wav(), "a.wav"))
    resp = await client.post("/v1/audio/transcriptions", data=body, headers=MULTIPART)
    assert resp.status == 400
    assert (await _error(resp))["code"] == "too_many_parts"
    # ~90 MB of fields that are each legal: refused from its Content-Length, unread.
    fields = [_part(f"f{i}", b"v" * 60_000) for i in range(1_500)]
    body = _body(_part("model", b"whisper-1"), *fields, _part("file", _wav(), "a.wav"))
    resp = await client.post("/v1/audio/transcriptions", data=io.BytesIO(body), headers=MULTIPART)
    assert resp.status == 413
    assert (await _error(resp))["code"] == "upload_too_large"


async def test_an_upload_declaring_more_than_the_cap_is_413_before_it_is_read(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, inputs={"upload_bytes": 200_000}))
    body = _body(_part("model", b"whisper-1"), _part("file", _wav(10), "a.wav"))
    assert len(body) > 300_000
    resp = await client.post("/v1/audio/transcriptions", data=body, headers=MULTIPART)
    assert resp.status == 413
    assert (await _error(resp))["code"] == "upload_too_large"


class _Refuse:
    """A stage that refuses every request, as a key over its RPM would be refused."""

    name = "refuse"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def before(self, req: GatewayRequest) -> None:
        self.seen.append(req.alias)
        raise RateLimited("over the key's requests per minute", retry_after=5)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        pass


async def test_limits_apply_before_the_file_of_an_upload_is_read(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    # asr.max_bytes (the older name of inputs.audio_bytes) makes the file too large to read.
    refuse = _Refuse()
    client = await gateway(_config(upstream, asr={"max_bytes": 100_000}), stages=[refuse])
    body = _body(_part("model", b"whisper-1"), _part("file", _wav(10), "a.wav"))
    resp = await client.post("/v1/audio/transcriptions", data=body, headers=MULTIPART)
    assert resp.status == 429, await resp.text()  # refused by the limits, not by the size
    assert refuse.seen == ["whisper-1"]
    # A client that sends the file first has it read (bounded) before the limits apply.
    late_model = _body(_part("file", _wav(10), "a.wav"), _part("model", b"whisper-1"))
    resp = await client.post("/v1/audio/transcriptions", data=late_model, headers=MULTIPART)
    assert resp.status == 413


async def test_malformed_uploads_are_400s_not_500s(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    cases = [
        (b"--not-the-boundary\r\n\r\nabc", MULTIPART),
        (_body(_part("model", b"w")), {**AUTH, "Content-Type": "multipart/form-data"}),
        (
            _body(_part("model", b"w"), _part("file", b"RIFF"), _part("file", b"RIFF")),
            MULTIPART,
        ),
        (b"\x1f\x8b\x08\x00garbage", {**MULTIPART, "Content-Encoding": "gzip"}),
    ]
    for data, headers in cases:
        resp = await client.post("/v1/audio/transcriptions", data=data, headers=headers)
        assert resp.status == 400, (data[:40], resp.status, await resp.text())
        assert (await _error(resp))["type"] == "invalid_request_error"


async def test_a_big_field_is_413_naming_the_field(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    body = _body(_part("model", b"whisper-1"), _part("prompt", b"p" * 70_000))
    resp = await client.post("/v1/audio/transcriptions", data=body, headers=MULTIPART)
    assert resp.status == 413
    assert (await _error(resp))["param"] == "prompt"


part_name = st.sampled_from(["file", "model", "language", "prompt", "response_format", "x", ""])
part_value = st.one_of(
    st.binary(max_size=256),
    st.sampled_from([b"whisper-1", b"json", b"srt", b"xml", b"en", b"RIFF", b"fLaC\x00"]),
)
form_part = st.tuples(part_name, part_value, st.booleans())
upload_body = st.one_of(
    st.lists(form_part, max_size=6).map(
        lambda parts: _body(*(_part(n, v, "a.wav" if f else None) for n, v, f in parts))
    ),
    st.binary(max_size=256),
)
upload_headers = st.fixed_dictionaries(
    {"Content-Type": st.sampled_from([MULTIPART["Content-Type"], "multipart/form-data",
                                      "multipart/mixed; boundary=x", "application/json", ""])},
    optional={"Content-Encoding": st.sampled_from(["gzip", "deflate", "br", "zstd", "bogus"])},
)  # fmt: skip


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    uploads=st.lists(st.tuples(upload_body, upload_headers), min_size=60, max_size=60),
    documents=st.lists(st.binary(max_size=64) | st.text(max_size=64).map(str.encode), max_size=20),
)
async def test_no_5xx_for_any_upload(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    uploads: list[tuple[bytes, dict[str, str]]],
    documents: list[bytes],
) -> None:
    client = await gateway(_config(upstream))
    statuses = []
    for body, headers in uploads:
        resp = await client.post("/v1/audio/transcriptions", data=body, headers={**AUTH, **headers})
        await resp.read()
        statuses.append(resp.status)
    for doc in documents:
        resp = await client.put("/admin/teams/t1/documents/d", data=doc, headers=AUTH)
        await resp.read()
        statuses.append(resp.status)
    assert all(status < 500 for status in statuses), statuses
