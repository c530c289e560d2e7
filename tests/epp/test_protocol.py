"""The protocol's messages: what the data plane sends is read, what the picker answers is
one value in header and metadata."""

from __future__ import annotations

from typing import Any

import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from google.protobuf import struct_pb2

from fleetgate.epp import protocol
from fleetgate.epp.endpoints import endpoint_of_url


def _metadata(namespace: str, fields: dict[str, Any]) -> Any:
    meta = base_pb2.Metadata()
    value = struct_pb2.Struct()
    value.update(fields)
    meta.filter_metadata[namespace].CopyFrom(value)
    return meta


def test_the_subset_hint_is_read_and_an_empty_one_differs_from_none() -> None:
    hinted = _metadata("envoy.lb.subset_hint",
                       {protocol.SUBSET: ["10.0.0.1:8000", "10.0.0.2:8000"]})  # fmt: skip
    assert protocol.subset_hint(hinted) == ["10.0.0.1:8000", "10.0.0.2:8000"]
    assert protocol.subset_hint(_metadata("envoy.lb.subset_hint", {protocol.SUBSET: []})) == []
    assert protocol.subset_hint(base_pb2.Metadata()) is None
    assert protocol.subset_hint(_metadata("other", {protocol.SUBSET: ["x:1"]})) is None


def test_the_served_endpoint_is_read_from_envoy_lb() -> None:
    meta = _metadata("envoy.lb", {protocol.SERVED: "10.0.0.2:8000"})
    assert protocol.served_endpoint(meta) == "10.0.0.2:8000"
    assert protocol.served_endpoint(base_pb2.Metadata()) is None
    assert protocol.served_endpoint(_metadata("envoy.lb", {protocol.SERVED: 3})) is None


def test_a_pick_sets_the_same_value_in_header_and_metadata_with_the_new_body() -> None:
    body = orjson.dumps({"model": "tiny"})
    reply = protocol.picked(["10.0.0.1:8000", "10.0.0.2:8000"], body, {"x-request-id": "r1"})
    common = reply.request_body.response
    headers = {
        h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers
    }
    meta = reply.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert headers[protocol.DESTINATION] == "10.0.0.1:8000,10.0.0.2:8000"
    assert meta[protocol.DESTINATION].string_value == headers[protocol.DESTINATION]
    assert headers["content-length"] == str(len(body))
    assert common.body_mutation.body == body
    assert headers["x-request-id"] == "r1"


def test_an_immediate_response_carries_status_body_and_headers() -> None:
    reply = protocol.immediate(429, b'{"error":{}}', [("Retry-After", "3")])
    sent = reply.immediate_response
    assert sent.status.code == 429
    assert sent.body == b'{"error":{}}'
    names = {h.header.key: h.header.raw_value for h in sent.headers.set_headers}
    assert names["Retry-After"] == b"3"


def test_headers_are_read_from_raw_value_or_value() -> None:
    headers = ext_proc.HttpHeaders()
    headers.headers.headers.add(key=":path", raw_value=b"/v1/chat/completions")
    headers.headers.headers.add(key="Authorization", value="Bearer k")
    assert protocol.header_map(headers) == {
        ":path": "/v1/chat/completions",
        "authorization": "Bearer k",
    }


def test_an_endpoint_is_host_and_port_of_the_api_base() -> None:
    assert endpoint_of_url("http://10.0.0.7:8000/v1") == "10.0.0.7:8000"
    assert endpoint_of_url("https://engine.local/v1") == "engine.local:443"
    assert endpoint_of_url("http://[fd00::1]:8000/v1") == "[fd00::1]:8000"
