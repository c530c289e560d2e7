"""A call to a tool server instead of a model: an MCP tool call, prompt or resource read.

It travels the same path as a model request: one `fleetgate.contract.request.GatewayRequest`
of endpoint ``Endpoint.MCP`` with the call in ``GatewayRequest.tool``, through the same
stages (`fleetgate.contract.stages.StageRun`). The stages read here what a model request does
not say:

- limits: the call counts no tokens, and also counts against ``limits`` (the tool server's
  and the MCP gateway's own), reserved with the key's, team's and alias's in one reservation;
- checks: ``arguments`` are text the caller sends (the input check point, before the call);
  the answer's text (`ToolResult`) is checked before anyone sees it, by the ``filters`` the
  stages add (as `fleetgate.contract.request.ResponseFilter` for a model's answer);
- billing: the entry point sets `fleetgate.contract.request.Outcome.cost_nusd` (a price per
  call) and ``deployment`` once the server answered a call that is priced.

Example::

    call = ToolCall("tool", "search", "web_search", {"q": "weather"},
                    limits=(CallLimit("mcp-server:search", rpm=600),))
    req.tool = call                      # before the stages run
    ...
    result = ToolResult(["Sunny."])      # the server's answer, as text
    for f in call.filters:
        await f.check(call, result)      # a check may mask texts or withhold it all
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["CallLimit", "ToolCall", "ToolKind", "ToolResult", "ToolResultFilter"]

ToolKind = Literal["tool", "prompt", "resource"]


@dataclass(frozen=True, slots=True)
class CallLimit:
    """A limit a call counts against besides its key's, team's and alias's, by scope name
    (``mcp-server:search``: every caller of that server together). None: not limited."""

    scope: str
    rpm: int | None = None
    max_parallel: int | None = None


@dataclass(slots=True)
class ToolResult:
    """The text of a tool server's answer as the checks see it and may rewrite it.

    ``texts``: one entry per part of the answer (a content block, a prompt message, a
    resource's contents), None for a part without text (an image). ``structured``: structured
    output as JSON text, which cannot be masked in place without breaking its schema.
    A check that blocks sets ``withheld`` (why: the checks and categories that flagged); a
    mask rewrites ``texts`` and sets ``masked``; a flag on ``structured`` withholds the whole
    answer with ``unmaskable`` set when it was only a mask."""

    texts: list[str | None]
    structured: str | None = None
    withheld: str | None = None
    unmaskable: bool = False
    masked: bool = False


class ToolResultFilter(Protocol):
    """Sees (and may mask or withhold) a tool server's answer before the caller does."""

    async def check(self, call: ToolCall, result: ToolResult) -> None: ...


@dataclass(slots=True)
class ToolCall:
    """One call to a tool server (see the module docstring). ``name``: the tool's or
    prompt's own name on its server, or the resource's URI."""

    kind: ToolKind
    server: str
    name: str
    arguments: dict[str, Any]
    limits: tuple[CallLimit, ...] = ()
    # Added by stages in ``before``, run by the entry point on the answer in this order.
    filters: list[ToolResultFilter] = field(default_factory=list)
