"""Text no store can hold, refused where it arrives.

PostgreSQL refuses a NUL character in text and UTF-8 cannot encode a lone surrogate, so a
request carrying either (in a JSON body, a query string or a path id) would fail deep inside a
route with a database error. Both are refused at parse time instead, with a 400 naming the
parameter: `refuse_unstorable_request` (called by the error middleware) checks path ids and
the query string of every request, and `fleetgate.http.body.read_json` checks every JSON body
with `check_json_text`. (orjson already refuses a lone surrogate escape in JSON; a path or
query value is decoded by yarl, which keeps invalid UTF-8 percent-encoded or replaces it, so
only NUL can arrive there.)

Example::

    refuse_unstorable_request(request)  # InvalidRequest(param="id") on a NUL in a path id
    check_json_text(raw, value)   # InvalidRequest(param="messages[0].content") on a NUL
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web

from fleetgate.errors import InvalidRequest

__all__ = ["WALK_BUDGET", "check_json_text", "refuse_unstorable_request", "unstorable"]


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored ("NUL characters", "lone surrogates"), or None."""
    if "\x00" in text:
        return "NUL characters"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "lone surrogates"
    return None


def _check(pairs: Iterable[tuple[str, str]], where: str) -> None:
    for name, value in pairs:
        shown = name.replace("\x00", "\\u0000")
        problem = unstorable(name)
        if problem is not None:
            raise InvalidRequest(f"{where} name '{shown}' must not contain {problem}.", param=shown)
        problem = unstorable(value)
        if problem is not None:
            raise InvalidRequest(f"{where} '{name}' must not contain {problem}.", param=name)


WALK_BUDGET = 20_000  # JSON values looked at to name a NUL's place (about 50 ms at most)


def _has_nul_escape(raw: bytes) -> bool:
    """Whether JSON text ``raw`` has a ``\\u0000`` escape (not an escaped backslash before
    ``u0000``): the only way a NUL can be in a string orjson parsed."""
    at = raw.find(b"\\u0000")
    while at >= 0:
        start = at
        while start > 0 and raw[start - 1] == 0x5C:  # backslashes before this one
            start -= 1
        if (at - start) % 2 == 0:  # an even run before it: this backslash starts an escape
            return True
        at = raw.find(b"\\u0000", at + 1)
    return False


def _children(node: Any, where: str) -> Iterator[tuple[Any, str]]:
    """The values in a JSON object or array with their paths, in document order (a NUL in a
    name raises at once)."""
    if isinstance(node, dict):
        for key, item in node.items():
            inner = f"{where}.{key}" if where else str(key)
            if "\x00" in key:
                shown = inner.replace("\x00", "\\u0000")
                raise InvalidRequest(
                    f"The name '{shown}' must not contain NUL characters.", param=shown
                )
            yield item, inner
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield item, f"{where}[{i}]"


def check_json_text(raw: bytes, value: Any) -> None:
    """400 for a parsed JSON body (``value``, parsed from ``raw``) with a NUL in a string or
    name, naming the first one in document order (the body itself when it is too big to
    search quickly)."""
    if not _has_nul_escape(raw):
        return
    if isinstance(value, str) and "\x00" in value:
        raise InvalidRequest("The request body must not contain NUL characters.")
    stack = [_children(value, "")]
    for _ in range(WALK_BUDGET):
        if not stack:
            break
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        node, where = step
        if isinstance(node, str):
            if "\x00" in node:
                raise InvalidRequest(f"'{where}' must not contain NUL characters.", param=where)
        elif isinstance(node, dict | list):
            stack.append(_children(node, where))
    raise InvalidRequest("The request body must not contain NUL characters.")


@web.middleware
def refuse_unstorable_request(request: web.Request) -> None:
    """400 for a path id or query parameter (name or value) holding text no store can hold.
    Called by the error middleware before every handler (a middleware of its own cost every
    request a layer of calls)."""
    if request.match_info:
        _check(request.match_info.items(), "The path parameter")
    if request.query_string:
        _check(request.query.items(), "The query parameter")
