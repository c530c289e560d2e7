"""OpenAI request schemas: validation of what callers send, and the OpenAPI description.

Validation only checks; the caller's original JSON object is what travels upstream, so unknown
vendor fields (``chat_template_kwargs``, ...) pass through untouched, except those only the
gateway sets (``cache_salt``, ``priority``, ``kv_transfer_params``, ...:
`fleetgate.providers.engine_fields`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from fleetgate.errors import InvalidRequest

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "validate_request",
]

Number = StrictInt | StrictFloat


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: StrictStr


class ToolCallFunction(_Open):
    name: StrictStr
    arguments: StrictStr


class ToolCall(_Open):
    id: StrictStr
    type: Literal["function"] = "function"
    function: ToolCallFunction


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: StrictStr | None = None


class FunctionDef(_Open):
    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    type: StrictStr = "function"
    function: FunctionDef | None = None


class StreamOptions(_Open):
    include_usage: StrictBool | None = None


class _Sampling(_Open):
    model: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    n: Annotated[StrictInt, Field(ge=1, le=128)] | None = None
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    presence_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    seed: StrictInt | None = None
    stop: StrictStr | list[StrictStr] | None = None
    user: StrictStr | None = None
    logit_bias: dict[str, Number] | None = None
    # never sent on (`fleetgate.providers.engine_fields`); below 0 would ask to jump the queue
    priority: Annotated[StrictInt, Field(ge=0)] | None = None


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    tools: list[Tool] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    modalities: list[StrictStr] | None = None


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    echo: StrictBool | None = None
    logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    suffix: StrictStr | None = None
    best_of: Annotated[StrictInt, Field(ge=1)] | None = None


class EmbeddingRequest(_Open):
    """``POST /v1/embeddings``."""

    model: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    input: (
        Annotated[StrictStr, Field(min_length=1)]
        | Annotated[list[StrictStr] | list[StrictInt] | list[list[StrictInt]], Field(min_length=1)]
    )
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None
    user: StrictStr | None = None
    priority: Annotated[StrictInt, Field(ge=0)] | None = None


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _describe(exc: ValidationError) -> tuple[str, str | None]:
    err = exc.errors(include_url=False)[0]
    # Drop pydantic's union-branch labels (str, list[...], function-after[...]) so the
    # param reads like messages.0.content.
    loc = [str(p) for p in err["loc"] if not ("[" in str(p) or str(p) in _UNION_TAGS)]
    param = ".".join(loc)
    return f"{param or 'body'}: {err['msg']}", param or None


def validate_request(schema: type[BaseModel], body: dict[str, Any]) -> BaseModel:
    """Validate ``body`` against ``schema``; a failure is a 400 naming the field."""
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        message, param = _describe(exc)
        raise InvalidRequest(f"Invalid request: {message}", param=param) from None
