"""The Anthropic front door (inbound): ``POST /v1/messages`` and ``/v1/messages/count_tokens``
for Anthropic SDK clients, over any upstream the gateway routes to.

- ``handlers``: the route handlers and :class:`AnthropicWire` (the answer in Anthropic's shape);
- ``request``: Anthropic Messages request -> OpenAI chat request;
- ``response``: OpenAI ``chat.completion`` -> Anthropic message (JSON out);
- ``stream``: OpenAI chunks -> Anthropic streaming events (stream out);
- ``errors``: fleetgate errors -> Anthropic error bodies (errors out).

The outbound direction (fleetgate calling Anthropic) is ``fleetgate.providers.anthropic``.
"""

from fleetgate.api.messages.handlers import AnthropicWire, count_tokens, messages

__all__ = ["AnthropicWire", "count_tokens", "messages"]
