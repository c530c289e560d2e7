"""A deployment as the router sees it: config, provider, and live state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fleetgate.config.schema import DeploymentConfig
from fleetgate.providers.base import Provider
from fleetgate.routing.tokenizer import PromptCounter

__all__ = ["Deployment", "DeploymentState", "deployment_key"]


def deployment_key(config: DeploymentConfig) -> str:
    """Stable identity across config reloads: same upstream, same model, same version."""
    return f"{config.provider}|{config.api_base}|{config.model}|{config.version}|{config.name}"


@dataclass(slots=True)
class DeploymentState:
    """Live numbers about one upstream; survives hot reloads (keyed by `deployment_key`)."""

    in_flight: int = 0
    ewma_ttft_s: float | None = None  # streams: time to the first token
    ewma_response_s: float | None = None  # JSON responses: time to the whole answer
    consecutive_failures: int = 0
    cooldown_until: float = 0.0
    last_failure: str = ""
    requests: int = 0
    last_request_at: float = 0.0  # time.monotonic() of the last attempt sent (sleep mode)
    asleep: bool = False  # put to sleep by the gateway (routing/wake.py)
    # `rpm` / `tpm` (routing/deployment_rate.py): the limiter refused this deployment until
    # then (monotonic), every request or (a tokens refusal) those of at least this many
    # prompt tokens; a hint that spares the round trip, the limiter decides
    rate_full_until: float = 0.0
    rate_full_prompt: int = 0

    def within_rate(self, prompt_tokens: int, now: float) -> bool:
        """Whether a request of ``prompt_tokens`` may try this deployment's window: not while
        the last refusal's window has not freed room for it."""
        return now >= self.rate_full_until or prompt_tokens < self.rate_full_prompt

    def rate_full(self, until: float, prompt_tokens: int, reason: str) -> None:
        """The limiter refused a request of ``prompt_tokens`` for ``reason`` (requests or
        tokens) until ``until``: pass the deployment over for such requests until then."""
        self.rate_full_until = until
        self.rate_full_prompt = prompt_tokens if reason == "tokens" else 0

    def healthy(self, now: float | None = None) -> bool:
        return self.cooldown_until <= (time.monotonic() if now is None else now)

    def observe_ttft(self, seconds: float, alpha: float = 0.2) -> None:
        prev = self.ewma_ttft_s
        self.ewma_ttft_s = seconds if prev is None else prev + alpha * (seconds - prev)

    def observe_response(self, seconds: float, alpha: float = 0.2) -> None:
        prev = self.ewma_response_s
        self.ewma_response_s = seconds if prev is None else prev + alpha * (seconds - prev)

    def latency_s(self) -> float | None:
        """What the latency strategy compares: the TTFT of streams when any were seen, else
        the time to a whole JSON answer (so JSON-only traffic is routed by latency too)."""
        return self.ewma_ttft_s if self.ewma_ttft_s is not None else self.ewma_response_s


@dataclass(eq=False, slots=True)
class Deployment:
    """One routable target of an alias."""

    id: str
    alias: str
    config: DeploymentConfig
    provider: Provider
    state: DeploymentState = field(default_factory=DeploymentState)
    counter: PromptCounter | None = None  # exact prompt counts (``tokenizer:``), else None

    def __post_init__(self) -> None:
        if self.counter is None and self.config.tokenizer:
            self.counter = PromptCounter(self.config.tokenizer)

    def prompt_tokens(self, body: dict[str, Any], estimate: int) -> int:
        """The prompt's tokens for this deployment: exact with a tokenizer, else ``estimate``."""
        return estimate if self.counter is None else self.counter.count(body)

    @property
    def name(self) -> str:
        return self.id

    @property
    def version(self) -> str:
        return self.config.version

    @property
    def is_local(self) -> bool:
        return self.config.is_local

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether the prompt and the output asked for fit the context window, and the output
        the most this deployment writes (``max_output_tokens``)."""
        cap = self.config.max_output_tokens
        if cap is not None and max_tokens > cap:
            return False
        window = self.config.context_window
        return window is None or prompt_tokens + max_tokens <= window

    @property
    def rate_capped(self) -> bool:
        """Whether the deployment has a per-minute cap (``rpm`` / ``tpm``)."""
        return self.config.rpm is not None or self.config.tpm is not None

    def within_rate(self, prompt_tokens: int, now: float | None = None) -> bool:
        """Whether a request of ``prompt_tokens`` may try this deployment's ``rpm`` / ``tpm``
        window (always, without caps): not while this process saw it refused for lack of
        room (the limiter decides when it is tried: `fleetgate.routing.deployment_rate`)."""
        if not self.rate_capped:
            return True
        return self.state.within_rate(prompt_tokens, time.monotonic() if now is None else now)

    def price_per_mtok(self) -> float:
        p = self.config.price
        return p.input_per_mtok + p.output_per_mtok
