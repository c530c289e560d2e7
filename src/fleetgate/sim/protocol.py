"""Parse OpenAI chat/completions request bodies into sequences for the simulated engine."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fleetgate.errors import ContextWindowExceeded, InvalidRequest, ModelNotFound
from fleetgate.sim.config import SimConfig
from fleetgate.sim.generation import corrupted, plan_output
from fleetgate.sim.sequence import SeqSpec
from fleetgate.sim.tokenizer import Tokenizer, last_user_text

__all__ = ["ParsedRequest", "check_model", "parse_chat", "parse_completion", "specs_for"]


@dataclass
class ParsedRequest:
    """A validated generation request: what to run and how to answer."""

    kind: Literal["chat", "completion"]
    request_id: str
    model: str
    stream: bool
    include_usage: bool
    specs: list[SeqSpec]
    prompt_tokens: int
    image_tokens: int = 0


def check_model(body: Any, config: SimConfig) -> str:
    """The served model name; 404 ``model_not_found`` for another model, 400 for a body that
    is not a JSON object."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    model = body.get("model")
    if model is None:
        return config.model
    if model != config.model:
        raise ModelNotFound(f"The model `{model}` does not exist.", param="model")
    return config.model


def _opt_int(body: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be an integer in {low}..{high}", param=name)
    return value


def _opt_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean", param=name)
    return value


def _common(body: Mapping[str, Any]) -> tuple[bool, bool, str | None, int]:
    stream = _opt_bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise InvalidRequest("'stream_options' must be an object", param="stream_options")
        include_usage = _opt_bool(options, "include_usage")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise InvalidRequest("'cache_salt' must be a non-empty string", param="cache_salt")
    n = _opt_int(body, "n", 1, 128) or 1
    return stream, include_usage, salt, n


def specs_for(
    body: Mapping[str, Any],
    config: SimConfig,
    rng: random.Random,
    prompts: list[tuple[list[int], str]],
) -> list[SeqSpec]:
    """One spec per (prompt, choice); validates lengths against the model and the KV cache."""
    max_tokens = _opt_int(body, "max_completion_tokens", 1, 1 << 30)
    if max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", 1, 1 << 30)
    seed = _opt_int(body, "seed", -(1 << 63), (1 << 64) - 1)
    ignore_eos = _opt_bool(body, "ignore_eos")
    _, _, salt, n = _common(body)
    priority = _opt_int(body, "priority", -(1 << 31), (1 << 31) - 1) or 0
    if priority and config.scheduling_policy != "priority":
        raise InvalidRequest(
            "Priority scheduling is not enabled (start the engine with "
            "--scheduling-policy priority).",
            param="priority",
        )
    choice_rng = random.Random(seed) if seed is not None else rng
    specs: list[SeqSpec] = []
    for prompt, echo_text in prompts:
        room = config.max_model_len - len(prompt)
        if room < 1 or (max_tokens is not None and max_tokens > room):
            raise ContextWindowExceeded(
                f"This model's maximum context length is {config.max_model_len} tokens. "
                f"However, you requested {len(prompt) + (max_tokens or 0)} tokens "
                f"({len(prompt)} in the messages, {max_tokens or 0} in the completion).",
                param="messages",
            )
        if -(-(len(prompt) + 1) // config.block_size) > config.kv_blocks:
            raise InvalidRequest(
                f"prompt of {len(prompt)} tokens does not fit in the KV cache", param="messages"
            )
        default_len = min(config.output_len, room) if config.mode == "random" else room
        echo_text = corrupted(echo_text, config.corrupt_fraction, config.corrupt_after_tokens)
        for _ in range(n):
            output, reason = plan_output(
                mode=config.mode,
                echo_text=echo_text,
                max_tokens=max_tokens,
                default_len=default_len,
                ignore_eos=ignore_eos,
                rng=choice_rng,
            )
            specs.append(SeqSpec(prompt, output, reason, salt, len(specs), priority))
    return specs


def parse_chat(
    body: Any, config: SimConfig, tokenizer: Tokenizer, rng: random.Random
) -> ParsedRequest:
    """Validate a ``/v1/chat/completions`` body."""
    model = check_model(body, config)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list", param="messages")
    stream, include_usage, _, _ = _common(body)
    prompt = tokenizer.encode_chat(messages)
    specs = specs_for(body, config, rng, [(prompt.ids, last_user_text(messages))])
    return ParsedRequest(
        "chat",
        f"chatcmpl-{uuid.uuid4().hex}",
        model,
        stream,
        include_usage,
        specs,
        len(prompt.ids),
        prompt.image_tokens,
    )


def _completion_prompts(prompt: Any, tokenizer: Tokenizer) -> list[tuple[list[int], str]]:
    if isinstance(prompt, str):
        return [(tokenizer.encode(prompt), prompt)]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [(list(prompt), "")]
        if all(isinstance(p, str) for p in prompt):
            return [(tokenizer.encode(p), p) for p in prompt]
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return [(list(p), "") for p in prompt]
    raise InvalidRequest(
        "'prompt' must be a string, a list of strings or a list of token ids", param="prompt"
    )


def parse_completion(
    body: Any, config: SimConfig, tokenizer: Tokenizer, rng: random.Random
) -> ParsedRequest:
    """Validate a ``/v1/completions`` body (one or several prompts)."""
    model = check_model(body, config)
    prompts = _completion_prompts(body.get("prompt"), tokenizer)
    stream, include_usage, _, _ = _common(body)
    specs = specs_for(body, config, rng, prompts)
    return ParsedRequest(
        "completion",
        f"cmpl-{uuid.uuid4().hex}",
        model,
        stream,
        include_usage,
        specs,
        sum(len(p) for p, _ in prompts),
    )
