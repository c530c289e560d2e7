"""Anthropic Messages upstreams (outbound): fleetgate calling Anthropic in its own wire format.

- ``provider``: :class:`AnthropicProvider`, registered as ``provider: anthropic``;
- ``request``: OpenAI chat request -> Anthropic Messages request (``content``: content parts);
- ``response``: Anthropic message -> OpenAI ``chat.completion``;
- ``stream``: Anthropic streaming events -> OpenAI chunks;
- ``errors``: Anthropic error answers -> fleetgate errors;
- ``wire``: version, URL, headers and error types, shared with the inbound front door
  (``fleetgate.api.messages``, which serves Anthropic SDK clients).

Example (non-streaming call through any HTTP client)::

    url = anthropic_messages_url("https://api.anthropic.com")
    payload = openai_chat_to_anthropic(openai_body, "claude-sonnet-4-5")
    status, body = await post_json(url, payload, headers=anthropic_headers(key))
    if status >= 400:
        raise anthropic_error(status, body)
    return anthropic_to_openai_response(body, openai_body["model"])
"""

from fleetgate.providers.anthropic.errors import anthropic_error
from fleetgate.providers.anthropic.provider import AnthropicProvider
from fleetgate.providers.anthropic.request import DEFAULT_MAX_TOKENS, openai_chat_to_anthropic
from fleetgate.providers.anthropic.response import anthropic_to_openai_response
from fleetgate.providers.anthropic.stream import AnthropicStreamTranslator
from fleetgate.providers.anthropic.wire import (
    ANTHROPIC_VERSION,
    anthropic_headers,
    anthropic_messages_url,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicProvider",
    "AnthropicStreamTranslator",
    "anthropic_error",
    "anthropic_headers",
    "anthropic_messages_url",
    "anthropic_to_openai_response",
    "openai_chat_to_anthropic",
]
