"""One sequence (one choice of one request) as the simulated engine sees it."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

__all__ = ["SeqEvent", "SeqSpec", "SeqState", "Sequence"]


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class SeqEvent:
    """One output token (``text``) of choice ``index``; ``finish_reason`` set on the last."""

    index: int
    text: str
    finish_reason: str | None = None


@dataclass(frozen=True)
class SeqSpec:
    """What to run: the prompt ids, the output pieces planned for it and the finish reason."""

    prompt: list[int]
    output: list[str]
    finish_reason: str
    salt: str | None = None
    index: int = 0
    priority: int = 0  # lower runs first (scheduling_policy "priority")
    remote_prefill: bool = False  # disaggregated decode: the prompt's KV came from a prefill engine
    encode_tokens: int = 0  # image tokens this engine encodes when it admits the sequence


@dataclass(eq=False)
class Sequence:
    """Mutable scheduling state of one sequence."""

    spec: SeqSpec
    hashes: list[int]
    sink: asyncio.Queue[SeqEvent]
    arrival: float
    state: SeqState = SeqState.WAITING
    blocks: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_generated: int = 0
    committed_blocks: int = 0
    cached_tokens: int = -1
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    encoded: bool = False  # its images were encoded (charged once, in its first step)
    preemptions: int = 0  # times it was preempted (its KV freed, recomputed later)

    @property
    def prompt_len(self) -> int:
        return len(self.spec.prompt)

    @property
    def prefill_target(self) -> int:
        """Tokens whose KV must exist before the next token can be generated."""
        return self.prompt_len + max(0, self.num_generated - 1)

    @property
    def prefilling(self) -> bool:
        return self.num_computed < self.prefill_target

    @property
    def done(self) -> bool:
        return self.state in (SeqState.FINISHED, SeqState.ABORTED)
