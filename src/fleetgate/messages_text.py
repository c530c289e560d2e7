"""The text of a chat message's ``content``: one function for every reader of it.

``content`` is a string, or a list of parts (``{"type": "text", "text": ...}``,
``{"type": "image_url", ...}``, ``{"type": "input_audio", ...}``, ...). Callers differ in how
they join the text parts, which part types carry text, what a text part without a string
becomes, and whether another part is an error; they say so through the parameters.

Example::

    content_text("hi")                                                  # 'hi'
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}},
               {"type": "text", "text": "here"}]
    content_text(content)                                               # 'look\\nhere'
    content_text(content, sep=" ")                                      # 'look here'
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

__all__ = ["content_text"]


def content_text(
    content: Any,
    *,
    sep: str = "\n",
    types: Collection[str] | None = ("text",),
    coerce: bool = False,
    on_other: Callable[[int, Any], None] | None = None,
) -> str:
    """The text of ``content``: a string as is; of a list, its text parts joined with ``sep``;
    of anything else, ``""``.

    A text part is a dict whose ``type`` is in ``types`` and whose value under that type's name
    is a string (``{"type": "text", "text": ...}``, ``{"type": "refusal", "refusal": ...}``);
    with ``types=None`` any dict with a ``"text"`` string is one, whatever its type.
    ``coerce``: a part of a listed type whose value is missing or not a string counts as
    ``str(value)`` (``""`` when missing) instead of being skipped. ``on_other(index, part)`` is
    called for each part that is not a text part (it may raise to refuse the content).
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out: list[str] = []
    for index, part in enumerate(content):
        value = _text_of_part(part, types, coerce)
        if value is not None:
            out.append(value)
        elif on_other is not None:
            on_other(index, part)
    return sep.join(out)


def _text_of_part(part: Any, types: Collection[str] | None, coerce: bool) -> str | None:
    if not isinstance(part, dict):
        return None
    kind: Any = "text" if types is None else part.get("type")
    if types is not None and (not isinstance(kind, str) or kind not in types):
        return None
    value = part.get(kind)
    if isinstance(value, str):
        return value
    if coerce and types is not None:
        return str(part.get(kind, ""))
    return None
