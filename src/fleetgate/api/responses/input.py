"""Responses ``input`` items for the ``/v1/responses`` bridge: as chat messages, as stored items.

:func:`input_messages` turns a validated ``input`` (a string or a list of ``message``,
``function_call``, ``function_call_output`` and ``reasoning`` items) into OpenAI chat messages
(every refusal an `InvalidRequest` naming the item, ``input[2].content[0].image_url``);
:func:`input_items` gives the same input as the items ``GET /v1/responses/{id}/input_items``
lists. The request's other fields are read in `fleetgate.api.responses.request`.
"""

from __future__ import annotations

import os
from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["input_items", "input_messages"]


def input_messages(raw: Any) -> list[dict[str, Any]]:
    """Chat messages for a Responses ``input`` (a string or a list of items)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise InvalidRequest("'input' must be a string or an array of items.", param="input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest("An input item must be an object.", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            _add_call(out, _function_call(item, where))
        elif kind == "function_call_output":
            out.append(_call_output(item, where))
        elif kind != "reasoning":
            raise InvalidRequest(
                f"Input items of type {kind!r} are not supported.", param=f"{where}.type"
            )
    return out


def _add_call(out: list[dict[str, Any]], call: dict[str, Any]) -> None:
    """Parallel calls (and a text turn followed by calls) are one chat assistant message."""
    last = out[-1] if out else None
    if last is not None and last.get("role") == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _string(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"'{name}' must be a non-empty string.", param=f"{where}.{name}")
    return value


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise InvalidRequest("'arguments' must be a string.", param=f"{where}.arguments")
    return {
        "id": _string(item, "call_id", where),
        "type": "function",
        "function": {"name": _string(item, "name", where), "arguments": arguments},
    }


def _call_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    output = item.get("output")
    if isinstance(output, list):
        output = "".join(_text_of(part, f"{where}.output[{j}]") for j, part in enumerate(output))
    if not isinstance(output, str):
        raise InvalidRequest("'output' must be a string or text parts.", param=f"{where}.output")
    return {"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": output}


def _text_of(part: Any, where: str) -> str:
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
        text = part.get("text")
        if isinstance(text, str):
            return text
    raise InvalidRequest("Only text parts are supported here.", param=where)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise InvalidRequest(
            "role must be user, assistant, system or developer.", param=f"{where}.role"
        )
    content = item.get("content")
    chat_role = "system" if role == "developer" else role
    if isinstance(content, str):
        return {"role": chat_role, "content": content}
    if not isinstance(content, list):
        raise InvalidRequest(
            "content must be a string or an array of parts.", param=f"{where}.content"
        )
    parts = [_part(p, f"{where}.content[{j}]", role) for j, p in enumerate(content)]
    if all(p["type"] == "text" for p in parts):
        return {"role": chat_role, "content": "".join(p["text"] for p in parts)}
    if role != "user":
        raise InvalidRequest(
            f"Only user messages may carry images or files, not {role}.", param=f"{where}.content"
        )
    return {"role": "user", "content": parts}


def _part(part: Any, where: str, role: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(part, dict):
        raise InvalidRequest("A content part must be an object.", param=where)
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": _text_of(part, where)}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise InvalidRequest(
                "An input_image needs an 'image_url' (file ids are not supported).",
                param=f"{where}.image_url",
            )
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file" and isinstance(part.get("file_data"), str):
        file: dict[str, Any] = {"file_data": part["file_data"]}
        if isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return {"type": "file", "file": file}
    raise InvalidRequest(
        f"Content parts of type {kind!r} are not supported.", param=f"{where}.type"
    )


def _item_id(item: dict[str, Any], prefix: str) -> str:
    given = item.get("id")
    return given if isinstance(given, str) and given else f"{prefix}_{os.urandom(16).hex()}"


def input_items(raw: Any) -> list[dict[str, Any]]:
    """A validated ``input`` as the items ``GET /v1/responses/{id}/input_items`` lists: each
    with an id (the client's, else a new one), message content as parts (reasoning items are
    left out, as they are not sent)."""
    if raw is None:
        return []
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message_item(item))
        elif kind == "function_call":
            out.append({
                "id": _item_id(item, "fc"), "type": "function_call", "status": "completed",
                "call_id": item["call_id"], "name": item["name"], "arguments": item["arguments"],
            })  # fmt: skip
        elif kind == "function_call_output":
            out.append({
                "id": _item_id(item, "fco"), "type": "function_call_output",
                "status": "completed", "call_id": item["call_id"], "output": item["output"],
            })  # fmt: skip
    return out


def _message_item(item: dict[str, Any]) -> dict[str, Any]:
    role, content = item["role"], item["content"]
    if role == "assistant":
        texts = [content] if isinstance(content, str) else [
            str(p.get("text") or p.get("refusal") or "") for p in content
        ]  # fmt: skip
        parts = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    else:
        parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {"id": _item_id(item, "msg"), "type": "message", "role": role,
            "status": "completed", "content": parts}  # fmt: skip
