"""Responses ``response`` object -> chat completion, for a native Responses upstream.

The answer is turned back into the gateway's inner form (a chat completion) so that every
stage reads it as it reads any other: the output checks see the text, spend sees the usage.
``message`` items give the text (``output_text`` and ``refusal`` parts, in order),
``function_call`` items the ``tool_calls`` (``id`` = ``call_id``), ``reasoning`` items
``reasoning_content``. Usage is billed as the upstream reported it: ``input_tokens`` ->
``prompt_tokens`` (of which ``input_tokens_details.cached_tokens`` were prompt-cache reads and
``cache_write_tokens`` writes), ``output_tokens`` -> ``completion_tokens``.
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import UpstreamBadResponse, UpstreamError, UpstreamStatusError

__all__ = ["chat_usage", "finish_reason", "responses_to_chat", "upstream_failure"]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """Chat ``usage`` from a Responses ``usage`` (None when there is none)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    details = _dict(usage.get("input_tokens_details"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": _int(details.get("cached_tokens")),
            "cache_write_tokens": _int(details.get("cache_write_tokens")),
        },
        "completion_tokens_details": {
            "reasoning_tokens": _int(
                _dict(usage.get("output_tokens_details")).get("reasoning_tokens")
            )  # fmt: skip
        },
    }


def finish_reason(response: dict[str, Any], has_calls: bool) -> str:
    """The chat ``finish_reason`` of a finished response."""
    if response.get("status") == "incomplete":
        reason = _dict(response.get("incomplete_details")).get("reason")
        return "content_filter" if reason == "content_filter" else "length"
    return "tool_calls" if has_calls else "stop"


def upstream_failure(error: Any) -> UpstreamError:
    """The error of a failed response (``response.failed`` or an ``error`` event)."""
    err = _dict(error)
    message = str(err.get("message") or "The upstream response failed.")
    code = str(err.get("code") or "")
    if code in ("rate_limit_exceeded", "insufficient_quota"):
        return UpstreamStatusError(f"upstream: {message}", upstream_status=429, body=None)
    if code in ("server_error", "vector_store_timeout", ""):
        return UpstreamStatusError(f"upstream: {message}", upstream_status=500, body=None)
    return UpstreamBadResponse(f"upstream response failed ({code}): {message}")


def text_of(item: dict[str, Any]) -> str:
    """The text of a ``message`` item (``output_text`` and ``refusal`` parts)."""
    out = []
    for part in item.get("content") or ():
        if isinstance(part, dict):
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
            out.append(text if isinstance(text, str) else "")
    return "".join(out)


def reasoning_of(item: dict[str, Any]) -> str:
    parts = [*(item.get("content") or ()), *(item.get("summary") or ())]
    return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict))


def responses_to_chat(response: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole chat completion for a Responses ``response`` object."""
    if response.get("status") == "failed":
        raise upstream_failure(response.get("error"))
    if response.get("object") != "response" or not isinstance(response.get("output"), list):
        raise UpstreamBadResponse("The upstream's answer is not a Responses response object.")
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response["output"]:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            text.append(text_of(item))
        elif kind == "function_call":
            calls.append({
                "id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
                "function": {"name": str(item.get("name") or ""),
                             "arguments": str(item.get("arguments") or "")},
            })  # fmt: skip
        elif kind == "reasoning":
            reasoning.append(reasoning_of(item))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    out: dict[str, Any] = {
        "id": str(response.get("id") or ""),
        "object": "chat.completion",
        "created": _int(response.get("created_at")),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(response, bool(calls))}],
    }  # fmt: skip
    usage = chat_usage(response.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out
