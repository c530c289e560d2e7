"""Which requests a response cache may answer, and the keys it files them under.

A request is **exact-cacheable** when it is a chat request whose answer does not depend on
chance (``temperature: 0`` or a ``seed``), asks for one choice, declares no tools or functions
(fleetgate cannot tell a tool with side effects from one without, so none are cached) and no
log-probabilities. Its key is the SHA-256 of the normalised request (sorted keys, ``null``
fields and the transport fields ``stream``, ``stream_options``, ``user``, ``metadata`` left
out, all-text content parts joined into a string) together with the tenant and the alias,
so a stream and a non-stream request share an entry and two teams never do.

A request is **semantic-cacheable** under the same rules except determinism; what is compared
is its last message (a user's, all text), and only with requests that had the same earlier
turns (`context_hash`): a follow-up whose history differs never matches.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

__all__ = ["context_hash", "deterministic", "exact_key", "last_user_text", "reusable"]

_TRANSPORT = frozenset({"stream", "stream_options", "user", "metadata", "store", "model"})
_NOT_REUSABLE = ("tools", "functions", "tool_choice", "function_call")


def reusable(body: dict[str, Any]) -> bool:
    """One choice, no tools or functions, no log-probabilities: an answer that can be replayed."""
    if any(body.get(field) for field in _NOT_REUSABLE):
        return False
    n = body.get("n")
    if n is not None and n != 1:
        return False
    return not body.get("logprobs") and isinstance(body.get("messages"), list)


def deterministic(body: dict[str, Any]) -> bool:
    """``temperature: 0`` or a ``seed``: the same request should get the same answer."""
    temperature = body.get("temperature")
    seed = body.get("seed")
    zero = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    return (zero and temperature == 0) or (isinstance(seed, int) and not isinstance(seed, bool))


def _content(value: Any) -> Any:
    if isinstance(value, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in value
    ):
        return "".join(p["text"] for p in value)
    return value


def _message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if v is not None}
    if "content" in out:
        out["content"] = _content(out["content"])
    return out


def _normalised(body: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in _TRANSPORT and v is not None}
    if isinstance(out.get("messages"), list):
        out["messages"] = [_message(m) for m in out["messages"]]
    return out


def _digest(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


def exact_key(tenant: str, alias: str, body: dict[str, Any]) -> str:
    """The exact cache's key of a request: tenant, alias and the normalised body."""
    return _digest("exact", tenant, alias, _normalised(body))


def last_user_text(body: dict[str, Any]) -> str | None:
    """The text of the last message when it is a user's and all text; else None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    content = _content(last.get("content"))
    if last.get("role") != "user" or not isinstance(content, str) or not content.strip():
        return None
    return content


def context_hash(body: dict[str, Any]) -> str:
    """Everything but the last message's text: the earlier turns and the generation fields."""
    rest = _normalised(body)
    messages = rest.pop("messages", [])
    return _digest("context", messages[:-1], rest)
