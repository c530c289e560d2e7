"""Responses request -> chat request, for the ``/v1/responses`` bridge.

:func:`parse_request` validates a ``POST /v1/responses`` body and turns its ``input`` into
OpenAI chat messages; :func:`chat_body` adds the conversation so far (``previous_response_id``)
and the ``instructions`` and gives the chat request the gateway serves. Every refusal is an
`InvalidRequest` naming the field (``input[2].content[0].image_url``).

Input items (turned into messages by `fleetgate.api.responses.input`): a string (one user
message); ``message`` items (roles ``user``, ``assistant``, ``system``, ``developer`` ->
``system``; content a string or ``input_text`` / ``input_image`` / ``input_file`` parts,
``output_text`` / ``refusal`` for assistant turns); ``function_call`` items (merged into the
assistant message before them, as chat tool calls); ``function_call_output`` items (``tool``
messages); ``reasoning`` items are dropped (a chat upstream cannot take them back).
``instructions`` become the first system message of this request only: as OpenAI documents,
they are not carried over to the next response.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleetgate.api.responses.input import input_items, input_messages
from fleetgate.errors import InvalidRequest
from fleetgate.http.fields import optional_array

__all__ = ["ResponsesRequest", "chat_body", "parse_request"]

# Accepted and not used by the bridge (they change nothing a chat upstream could honour); a
# native upstream gets them (`_NATIVE`).
_IGNORED = frozenset(
    {
        "include", "reasoning", "service_tier", "truncation", "prompt_cache_key",
        "prompt_cache_retention", "safety_identifier", "top_logprobs", "stream_options",
        "max_tool_calls", "context_management", "prompt_cache_options",
    }
)  # fmt: skip
# Passed on as they came to an upstream that speaks the Responses API natively.
_NATIVE = (_IGNORED - {"stream_options"}) | {"text"}
_KNOWN = frozenset(
    {
        "model", "input", "instructions", "stream", "store", "previous_response_id",
        "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
        "parallel_tool_calls", "text", "metadata", "user", "background",
    }
) | _IGNORED  # fmt: skip


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request: ``messages`` is this turn's input as chat messages,
    ``fields`` the chat request's other fields (tools, limits, sampling)."""

    body: dict[str, Any]  # as the client sent it (echoed in the response object)
    model: str
    stream: bool
    store: bool
    previous_response_id: str | None
    instructions: str | None
    messages: list[dict[str, Any]]
    fields: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)  # the input as items, with ids
    # The fields a native Responses upstream is sent as they came (``reasoning``, ``include``,
    # ``text`` with its ``verbosity``, ...); a bridged request does without them.
    native: dict[str, Any] = field(default_factory=dict)


def parse_request(body: Any) -> ResponsesRequest:
    """Validate a ``POST /v1/responses`` body; `InvalidRequest` (with ``param``) when wrong."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    for name in body:
        if name not in _KNOWN:
            raise InvalidRequest(f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a string.", param="model")
    if body.get("background"):
        raise InvalidRequest("Background responses are not supported.", param="background")
    previous = _optional(body, "previous_response_id", str)
    instructions = _optional(body, "instructions", str)
    raw_input = body.get("input")
    if raw_input is None and previous is None:
        raise InvalidRequest("'input' is required.", param="input")
    messages = input_messages(raw_input) if raw_input is not None else []
    return ResponsesRequest(
        body=body,
        model=model,
        stream=_flag(body, "stream", False),
        store=_flag(body, "store", True),
        previous_response_id=previous,
        instructions=instructions or None,
        messages=messages,
        fields=_chat_fields(body),
        items=input_items(raw_input),
        native={k: v for k, v in body.items() if k in _NATIVE and v is not None},
    )


def chat_body(req: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The chat request for ``req`` after the conversation ``history`` (chat messages)."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    messages.extend(history or ())
    messages.extend(_new_calls_only(req.messages, history or ()))
    if not messages:
        raise InvalidRequest("'input' must not be empty.", param="input")
    out: dict[str, Any] = {"model": req.model, "messages": messages, **req.fields}
    if req.stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _new_calls_only(
    messages: list[dict[str, Any]], history: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` less the tool calls already in ``history``: a client that sends back the
    previous output (function calls) with ``previous_response_id`` sends them twice."""
    known = {
        call.get("id")
        for m in history
        for call in m.get("tool_calls") or ()
        if isinstance(call, dict)
    }
    if not known:
        return messages
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            fresh = [c for c in calls if c.get("id") not in known]
            if not fresh and not m.get("content"):
                continue
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            if fresh:
                m["tool_calls"] = fresh
        out.append(m)
    return out


def _optional(body: dict[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"'{name}' must be a {kind.__name__}.", param=name)
    return value


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean.", param=name)
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be a number from {low} to {high}.", param=name)
    return value


def _chat_fields(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limit = body.get("max_output_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(
                "'max_output_tokens' must be a positive integer.", param="max_output_tokens"
            )
        out["max_tokens"] = limit
    for name, high in (("temperature", 2.0), ("top_p", 1.0)):
        value = _number(body, name, 0.0, high)
        if value is not None:
            out[name] = value
    user = _optional(body, "user", str)
    if user:
        out["user"] = user
    if body.get("parallel_tool_calls") is not None:
        out["parallel_tool_calls"] = _flag(body, "parallel_tool_calls", True)
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        out["tool_choice"] = choice
    out.update(_text_format(body.get("text")))
    _metadata(body.get("metadata"))
    return out


def _metadata(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or len(value) > 16:
        raise InvalidRequest("'metadata' must be an object of at most 16 pairs.", param="metadata")
    for k, v in value.items():
        if not isinstance(v, str) or len(k) > 64 or len(v) > 512:
            raise InvalidRequest(
                "metadata keys are strings of at most 64 characters, values of at most 512.",
                param=f"metadata.{k}",
            )


def _tools(raw: Any) -> list[dict[str, Any]]:
    """Chat function tools from Responses function tools (``name`` at the top level)."""
    tools = []
    for i, tool in enumerate(optional_array(raw, "tools")):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequest(
                f"Only function tools are supported here, not {kind!r}.", param=f"{where}.type"
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A function tool needs a 'name'.", param=f"{where}.name")
        fn: dict[str, Any] = {"name": name}
        parameters = tool.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise InvalidRequest("'parameters' must be an object.", param=f"{where}.parameters")
            fn["parameters"] = parameters
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        if isinstance(tool.get("strict"), bool):
            fn["strict"] = tool["strict"]
        tools.append({"type": "function", "function": fn})
    return tools


def _tool_choice(raw: Any) -> Any:
    if raw is None or raw in ("auto", "none", "required"):
        return raw
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    raise InvalidRequest(
        "'tool_choice' must be auto, none, required or a function.", param="tool_choice"
    )


def _text_format(text: Any) -> dict[str, Any]:
    """Chat ``response_format`` from ``text.format``."""
    if text is None:
        return {}
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(text, dict) or (fmt is not None and not isinstance(fmt, dict)):
        raise InvalidRequest("'text' must be an object with a 'format' object.", param="text")
    kind = fmt.get("type") if fmt else "text"
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if kind == "json_schema" and fmt is not None and isinstance(fmt.get("schema"), dict):
        schema: dict[str, Any] = {"name": str(fmt.get("name") or "output"), "schema": fmt["schema"]}
        if isinstance(fmt.get("strict"), bool):
            schema["strict"] = fmt["strict"]
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    raise InvalidRequest(
        "'text.format' must be text, json_object or json_schema (with a schema).",
        param="text.format",
    )
