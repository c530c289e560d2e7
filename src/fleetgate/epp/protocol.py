"""The Endpoint Picker Protocol's wire: its names and the ext_proc messages fleetgate sends.

The protocol (gateway-api-inference-extension, proposal 004, v1.0) rides on Envoy's external
processing service (``envoy.service.ext_proc.v3``). What it fixes, and what this module names:

- the data plane may narrow the pool with the filter metadata
  ``envoy.lb.subset_hint`` / ``x-gateway-destination-endpoint-subset`` (a list of ``ip:port``);
- the picker answers with the header ``x-gateway-destination-endpoint`` **and** the dynamic
  metadata ``envoy.lb`` / ``x-gateway-destination-endpoint``, the same value: one ``ip:port``
  or a comma-separated list the data plane walks on retries;
- no ready endpoint: an immediate 503; a request shed: an immediate 429;
- on the response, ``envoy.lb`` / ``x-gateway-destination-endpoint-served`` names the endpoint
  that really served it.

fleetgate's own addition, for a second ext_proc filter in observability mode that sees the
response (``--response-body observed``): the pick also sets ``fleetgate`` / ``request-id`` in
the dynamic metadata, which that filter forwards, so its stream finds the request it belongs to.

Only messages are built here (no I/O); the stubs are Envoy's own, from ``xds-protos``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2
from google.protobuf import duration_pb2, struct_pb2

__all__ = [
    "DESTINATION",
    "LB_NAMESPACE",
    "SERVED",
    "SUBSET",
    "SUBSET_NAMESPACE",
    "TAG_NAMESPACE",
    "body_reply",
    "continue_body",
    "continue_headers",
    "header_map",
    "immediate",
    "more_time",
    "picked",
    "response_headers",
    "served_endpoint",
    "subset_hint",
    "tagged_request",
    "trailers",
]

DESTINATION = "x-gateway-destination-endpoint"
SERVED = "x-gateway-destination-endpoint-served"
SUBSET = "x-gateway-destination-endpoint-subset"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
TAG_NAMESPACE = "fleetgate"
_REQUEST_ID = "request-id"

_MAX_SUBSET = 10_000  # endpoints read from one hint at most (a pool is far smaller)


def header_map(headers: Any) -> dict[str, str]:
    """The request's or response's headers, lower-case names (Envoy sends them so); a value
    arrives in ``raw_value`` (bytes) or, from older proxies, ``value``."""
    out: dict[str, str] = {}
    for h in headers.headers.headers:
        value = h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value
        out[h.key.lower()] = value
    return out


def _string_list(value: Any) -> list[str] | None:
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        items = value.list_value.values[:_MAX_SUBSET]
        return [v.string_value for v in items if v.WhichOneof("kind") == "string_value"]
    if kind == "string_value":  # tolerated: one string, comma-separated
        return [p.strip() for p in value.string_value.split(",")[:_MAX_SUBSET] if p.strip()]
    return None


def subset_hint(metadata: Any) -> list[str] | None:
    """The endpoints the data plane allows (``ip:port``), or None when it set no hint.
    An empty list is a hint too: nothing is eligible (the protocol's 503)."""
    ns = metadata.filter_metadata.get(SUBSET_NAMESPACE)
    if ns is None or SUBSET not in ns.fields:
        return None
    return _string_list(ns.fields[SUBSET]) or []


def _metadata_string(metadata: Any, namespace: str, key: str) -> str | None:
    """The string ``key`` of the ``namespace`` dynamic metadata, stripped (None: not there)."""
    ns = metadata.filter_metadata.get(namespace)
    if ns is None or key not in ns.fields:
        return None
    value = ns.fields[key]
    if value.WhichOneof("kind") != "string_value":
        return None
    return value.string_value.strip() or None


def tagged_request(metadata: Any) -> str | None:
    """The request id the pick put in the ``fleetgate`` metadata (None: not there)."""
    return _metadata_string(metadata, TAG_NAMESPACE, _REQUEST_ID)


def served_endpoint(metadata: Any) -> str | None:
    """The endpoint that served the response, as the data plane reports it (None: unsaid)."""
    return _metadata_string(metadata, LB_NAMESPACE, SERVED)


# The replies that change nothing, built once: they are only serialized, never modified.
_CONTINUE = {
    "request_headers": ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse()),
    "response_headers": ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse()),
    "request_body": ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse()),
    "response_body": ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse()),
}


def continue_headers(*, request: bool) -> Any:
    """Let the headers pass unchanged (the pick comes with the body)."""
    return _CONTINUE["request_headers" if request else "response_headers"]


def _mutation(set_headers: Mapping[str, str], remove: Sequence[str] = ()) -> Any:
    return ext_proc.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
            for k, v in set_headers.items()
        ],
        remove_headers=list(remove),
    )


def response_headers(set_headers: Mapping[str, str]) -> Any:
    """Continue the response with ``set_headers`` added (request id, deployment, limits)."""
    common = ext_proc.CommonResponse(header_mutation=_mutation(set_headers))
    return ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse(response=common))


def picked(
    endpoints: Sequence[str],
    body: bytes | None,
    set_headers: Mapping[str, str],
    *,
    on_headers: bool = False,
    request_id: str | None = None,
) -> Any:
    """The pick, answered to the request body: the destination header and the ``envoy.lb``
    metadata with the same value, ``body`` (when rewritten) in place of the client's with its
    content-length, and ``set_headers`` for the engine (the request id, trace context).
    ``on_headers``: the answer to the request's headers (a request without a body);
    ``request_id``: also set as the ``fleetgate`` metadata (for an observing filter)."""
    value = ",".join(endpoints)
    headers = {**set_headers, DESTINATION: value}
    mutation = None
    if body is not None:
        headers["content-length"] = str(len(body))
        mutation = ext_proc.BodyMutation(body=body)
    common = ext_proc.CommonResponse(header_mutation=_mutation(headers), body_mutation=mutation)
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: value}})
    if request_id is not None:
        metadata.update({TAG_NAMESPACE: {_REQUEST_ID: request_id}})
    if on_headers:
        return ext_proc.ProcessingResponse(
            request_headers=ext_proc.HeadersResponse(response=common), dynamic_metadata=metadata
        )
    return ext_proc.ProcessingResponse(
        request_body=ext_proc.BodyResponse(response=common), dynamic_metadata=metadata
    )


def trailers(*, request: bool) -> Any:
    """Let trailers pass unchanged."""
    reply = ext_proc.TrailersResponse()
    if request:
        return ext_proc.ProcessingResponse(request_trailers=reply)
    return ext_proc.ProcessingResponse(response_trailers=reply)


def continue_body(*, request: bool) -> Any:
    """Let a body chunk pass unchanged."""
    return _CONTINUE["request_body" if request else "response_body"]


def body_reply(body: bytes) -> Any:
    """A response body chunk replaced by ``body`` (the injected usage event taken out)."""
    common = ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(body=body))
    return ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse(response=common))


def immediate(status: int, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> Any:
    """Answer the client now (503: no endpoint, 429: shed, a refusal); nothing goes upstream."""
    mutation = _mutation({"content-type": "application/json", **dict(headers)})
    reply = ext_proc.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        headers=mutation,
        body=body,
        details=f"fleetgate_epp_{status}",
    )
    return ext_proc.ProcessingResponse(immediate_response=reply)


def more_time(seconds: float) -> Any:
    """Ask Envoy for ``seconds`` more on the message it waits on (``override_message_timeout``:
    its timer restarts with that value, once per message; Envoy ignores it unless its filter's
    ``max_message_timeout`` is at least that). Sent while a pick waits for a pool to wake."""
    timeout = duration_pb2.Duration()
    timeout.FromMilliseconds(max(1, round(seconds * 1000)))
    return ext_proc.ProcessingResponse(override_message_timeout=timeout)
