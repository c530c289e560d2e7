"""What the checks see of an MCP server's answer, and the answer the caller gets after them.

The request path's checks (the safety stage, `fleetgate.safety.tool_calls`) see an answer as
a `fleetgate.contract.tool.ToolResult`: the text of each part (content blocks, a prompt's
messages, a resource's contents) and structured output as JSON text. `Answer` maps one kind
of answer there (``texts``) and back (``reply``): masked texts are written into their parts;
a withheld tool result becomes an ``isError`` result naming the checks that flagged it, a
withheld prompt or resource the JSON-RPC error ``WITHHELD`` (`fleetgate.mcp.rpc`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import mcp.types as types

from fleetgate.contract.tool import ToolResult
from fleetgate.errors import ContentBlocked

__all__ = [
    "PROMPT",
    "RESOURCE",
    "TOOL",
    "Answer",
    "Withheld",
    "block_text",
    "with_text",
]

T = TypeVar("T")


class Withheld(ContentBlocked):
    """A prompt's or resource's text that the caller's content policy blocked."""


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """One kind of answer: its text for the checks, and the caller's answer after them."""

    texts: Callable[[T], ToolResult]
    reply: Callable[[T, ToolResult], T]


def block_text(block: Any) -> str | None:
    """The text of a content block (text, or an embedded text resource); None otherwise."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(
        block.resource, types.TextResourceContents
    ):
        return block.resource.text
    return None


def with_text(block: Any, text: str) -> Any:
    if isinstance(block, types.TextContent):
        return block.model_copy(update={"text": text})
    resource = block.resource.model_copy(update={"text": text})
    return block.model_copy(update={"resource": resource})


def _tool_texts(result: types.CallToolResult) -> ToolResult:
    structured = result.structured_content
    return ToolResult(
        [block_text(b) for b in result.content],
        None if structured is None else json.dumps(structured, ensure_ascii=False),
    )


def _tool_reply(result: types.CallToolResult, checked: ToolResult) -> types.CallToolResult:
    if checked.withheld is not None:
        if checked.unmaskable:
            text = (
                "The gateway withheld this tool result: its structured content holds data the "
                f"content policy masks ({checked.withheld}), and JSON cannot be masked in place."
            )
        else:
            text = (
                "The gateway withheld this tool result: its content policy flagged it "
                f"({checked.withheld})."
            )
        withheld = types.TextContent(type="text", text=text)
        return types.CallToolResult(content=[withheld], is_error=True)
    if not checked.masked:
        return result
    content = [
        b if t is None else with_text(b, t)
        for b, t in zip(result.content, checked.texts, strict=True)
    ]
    return result.model_copy(update={"content": content})


def _withheld(kind: str, checked: ToolResult) -> Withheld:
    return Withheld(
        f"The gateway withheld this {kind}: its content policy flagged it ({checked.withheld})."
    )


def _prompt_texts(result: types.GetPromptResult) -> ToolResult:
    return ToolResult([block_text(m.content) for m in result.messages])


def _prompt_reply(result: types.GetPromptResult, checked: ToolResult) -> types.GetPromptResult:
    if checked.withheld is not None:
        raise _withheld("prompt", checked)
    if not checked.masked:
        return result
    messages = [
        m if t is None else m.model_copy(update={"content": with_text(m.content, t)})
        for m, t in zip(result.messages, checked.texts, strict=True)
    ]
    return result.model_copy(update={"messages": messages})


def _resource_texts(result: types.ReadResourceResult) -> ToolResult:
    return ToolResult(
        [c.text if isinstance(c, types.TextResourceContents) else None for c in result.contents]
    )


def _resource_reply(
    result: types.ReadResourceResult, checked: ToolResult
) -> types.ReadResourceResult:
    if checked.withheld is not None:
        raise _withheld("resource", checked)
    if not checked.masked:
        return result
    contents = [
        c if t is None else c.model_copy(update={"text": t})
        for c, t in zip(result.contents, checked.texts, strict=True)
    ]
    return result.model_copy(update={"contents": contents})


TOOL: Answer[types.CallToolResult] = Answer(_tool_texts, _tool_reply)
PROMPT: Answer[types.GetPromptResult] = Answer(_prompt_texts, _prompt_reply)
RESOURCE: Answer[types.ReadResourceResult] = Answer(_resource_texts, _resource_reply)
