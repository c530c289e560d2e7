"""Chat request -> Responses request, for a deployment that speaks ``/v1/responses`` natively.

Inside the gateway a Responses request is a chat request (``api/responses``): the stages read
and rewrite its messages (input checks that mask, prompt assembly, processed images), so the
upstream request is built from the chat body *as the stages left it*, plus the client's own
Responses fields that chat has no word for (`UpstreamCall.responses`: ``reasoning``,
``include``, ``truncation``, ...). ``store`` is always false upstream: the gateway keeps the
conversation (per tenant) and sends it whole, so the upstream never holds a tenant's state and
any deployment of the alias (native or bridged) can serve any turn.

=====================================  =========================================
chat                                   Responses
=====================================  =========================================
``system`` / ``developer`` messages    ``message`` items, role ``system`` / ``developer``
``user`` text / ``image_url`` / ``file`` ``input_text`` / ``input_image`` / ``input_file``
``assistant`` text                     ``message`` item, role ``assistant``
``assistant`` ``tool_calls``           ``function_call`` items (``call_id`` = the call's id)
``tool`` messages                      ``function_call_output`` items
function ``tools``, ``tool_choice``    Responses function tools (``name`` at the top level)
``max_tokens``                         ``max_output_tokens``
``response_format``                    ``text.format`` (the client's ``text`` when it sent one)
=====================================  =========================================
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["chat_to_responses"]

# Chat fields with the same name and meaning in a Responses request.
_SAME = ("temperature", "top_p", "user", "parallel_tool_calls")
# vLLM's own request fields that routing may add (per-tenant prefix cache salt, priority band,
# the decode half of a pd-disagg pair); vLLM's /v1/responses takes them as its chat endpoint.
_ENGINE = ("cache_salt", "priority", "kv_transfer_params")


def chat_to_responses(
    body: dict[str, Any], extra: dict[str, Any] | None, stream: bool
) -> dict[str, Any]:
    """The ``/v1/responses`` body for a chat ``body`` (the upstream model already named);
    ``extra``: the client's Responses-only fields, passed on as they came."""
    instructions, messages = _instructions(body.get("messages") or [])
    out: dict[str, Any] = {
        "model": body["model"],
        "input": [item for m in messages for item in _items(m)],
        "store": False,
        "stream": stream,
    }
    if instructions is not None:
        out["instructions"] = instructions
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int):
        out["max_output_tokens"] = limit
    for name in (*_SAME, *_ENGINE):
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("tools"):
        out["tools"] = [_tool(t) for t in body["tools"]]
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    text = _text(body.get("response_format"))
    if text is not None:
        out["text"] = text
    for name, value in (extra or {}).items():
        out[name] = value  # the client's own Responses fields (``text`` with its verbosity)
    return out


def _instructions(messages: list[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """A leading system message with text only becomes ``instructions`` (what the client sent
    as such, or what prompt assembly put first); the rest stay messages."""
    rest = [m for m in messages if isinstance(m, dict)]
    if rest and rest[0].get("role") == "system" and isinstance(rest[0].get("content"), str):
        return rest[0]["content"], rest[1:]
    return None, rest


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        return [{
            "type": "function_call_output", "call_id": str(message.get("tool_call_id") or ""),
            "output": content if isinstance(content, str) else _joined(content),
        }]  # fmt: skip
    items: list[dict[str, Any]] = []
    if role == "assistant":
        text = content if isinstance(content, str) else _joined(content)
        if text:
            items.append({"type": "message", "role": "assistant", "content": text})
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            items.append({
                "type": "function_call", "call_id": str(call.get("id") or ""),
                "name": str(fn.get("name") or ""), "arguments": str(fn.get("arguments") or ""),
            })  # fmt: skip
        return items
    if role not in ("system", "developer", "user"):
        raise InvalidRequest(f"A {role!r} message cannot be sent to a Responses upstream.")
    if isinstance(content, str) or content is None:
        return [{"type": "message", "role": role, "content": content or ""}]
    return [{"type": "message", "role": role, "content": [_part(p) for p in content]}]


def _joined(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict))


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": str(part.get("text") or "")}
    if kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        out = {"type": "input_image", "image_url": image.get("url"), "detail": "auto"}
        if image.get("detail") in ("low", "high", "auto"):
            out["detail"] = image["detail"]
        return out
    if kind == "file":
        raw = part.get("file")
        file: dict[str, Any] = raw if isinstance(raw, dict) else {}
        return {"type": "input_file", **{k: v for k, v in file.items() if k != "file_id"}}
    raise InvalidRequest(f"Content parts of type {kind!r} cannot be sent to a Responses upstream.")


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") or {}
    out: dict[str, Any] = {"type": "function", "name": fn.get("name")}
    for name in ("description", "parameters", "strict"):
        if fn.get(name) is not None:
            out[name] = fn[name]
    if "strict" not in out:
        out["strict"] = False  # chat's default; Responses would default to strict
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        fn = choice.get("function") or {}
        return {"type": "function", "name": fn.get("name")}
    return choice


def _text(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return {"format": {"type": "json_object"}}
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        return {"format": {"type": "json_schema", **response_format["json_schema"]}}
    return None
