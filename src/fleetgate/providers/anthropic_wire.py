"""Anthropic and Azure wire formats: the public surface the provider layer wires in.

Pure functions and small stateful translators, no I/O:

- request: :func:`openai_chat_to_anthropic` (OpenAI chat body -> Anthropic Messages body);
- response: :func:`anthropic_to_openai_response`;
- stream: :class:`SSEParser` (bytes -> ``(event, data)``) and
  :class:`AnthropicStreamTranslator` (events -> OpenAI chunks);
- errors: :func:`anthropic_error` (status + body -> fleetgate error);
- the ``/v1/messages`` front door: :func:`anthropic_request_to_openai`,
  :func:`openai_response_to_anthropic`, :class:`OpenAIToAnthropicStream`;
- Azure OpenAI: :func:`azure_url`, :func:`azure_headers`;
- :func:`anthropic_headers` and :func:`anthropic_messages_url` for calling Anthropic.

Example (non-streaming call through any HTTP client)::

    url = anthropic_messages_url("https://api.anthropic.com")
    payload = openai_chat_to_anthropic(openai_body, "claude-sonnet-4-5")
    status, body = await post_json(url, payload, headers=anthropic_headers(key))
    if status >= 400:
        raise anthropic_error(status, body)
    return anthropic_to_openai_response(body, openai_body["model"])
"""

from __future__ import annotations

from fleetgate.providers.anthropic_errors import (
    ANTHROPIC_ERROR_STATUS,
    anthropic_error,
    anthropic_error_body,
    anthropic_stream_error,
    fleetgate_error_to_anthropic,
)
from fleetgate.providers.anthropic_frontdoor import (
    anthropic_request_to_openai,
    openai_response_to_anthropic,
)
from fleetgate.providers.anthropic_frontdoor_stream import OpenAIToAnthropicStream
from fleetgate.providers.anthropic_request import DEFAULT_MAX_TOKENS, openai_chat_to_anthropic
from fleetgate.providers.anthropic_response import (
    anthropic_to_openai_response,
    finish_reason,
    openai_usage,
)
from fleetgate.providers.anthropic_sse import SSEParser, encode_sse
from fleetgate.providers.anthropic_stream import AnthropicStreamTranslator
from fleetgate.providers.azure_openai import azure_headers, azure_url

__all__ = [
    "ANTHROPIC_ERROR_STATUS",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicStreamTranslator",
    "OpenAIToAnthropicStream",
    "SSEParser",
    "anthropic_error",
    "anthropic_error_body",
    "anthropic_headers",
    "anthropic_messages_url",
    "anthropic_request_to_openai",
    "anthropic_stream_error",
    "anthropic_to_openai_response",
    "azure_headers",
    "azure_url",
    "encode_sse",
    "finish_reason",
    "fleetgate_error_to_anthropic",
    "openai_chat_to_anthropic",
    "openai_response_to_anthropic",
    "openai_usage",
]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value (the current version of the Messages API)."""


def anthropic_headers(api_key: str, *, version: str = ANTHROPIC_VERSION) -> dict[str, str]:
    """Headers for an Anthropic Messages call: the key goes in ``x-api-key``, not Authorization."""
    return {
        "x-api-key": api_key,
        "anthropic-version": version,
        "content-type": "application/json",
    }


def anthropic_messages_url(api_base: str) -> str:
    """``{api_base}/v1/messages``; ``api_base`` may end in ``/`` or ``/v1``."""
    return api_base.rstrip("/").removesuffix("/v1") + "/v1/messages"
