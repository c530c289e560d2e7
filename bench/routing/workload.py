"""The routing benchmark's workload: llm-d's shared-prefix benchmark, scaled down.

llm-d's "KV-cache wins you can see" benchmark: 150 customer groups, each with a ~6,000-token
system prompt shared by its users, 5 users per group sending ~1,200-token questions, QPS ramping
up over the run on 8 vLLM pods. Here: ``groups`` groups with a ``prefix_words``-word system
prompt, ``users`` users per group, each arrival being the next turn of one user's conversation
(its earlier questions and answers stay in the prompt, as in a chat), Poisson arrivals whose
rate rises linearly from ``rate_start`` to ``rate_end`` over ``duration_s``.

``shared=False`` gives every request its own random system prompt of the same length: the
no-shared-prefix control, where only load balancing can help.

The schedule is a pure function of the parameters and the seed, so every strategy gets the
same requests at the same offsets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Arrival", "Workload", "build_schedule"]

_WORDS = (
    "account billing invoice roaming network plan device contract upgrade refund payment "
    "balance coverage signal router modem fiber outage ticket agent policy discount family "
    "prepaid postpaid international data voice message limit charge credit order shipping"
).split()


@dataclass(frozen=True)
class Workload:
    groups: int = 12
    users: int = 4
    prefix_words: int = 1400
    question_words: int = 60
    answer_words: int = 40
    max_turns: int = 4
    output_tokens: int = 24
    rate_start: float = 2.0
    rate_end: float = 14.0
    duration_s: float = 40.0
    shared: bool = True
    seed: int = 7


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds from the start
    user: str  # "g3-u1": the session id
    group: int
    body: dict[str, Any] = field(hash=False, compare=False)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _times(w: Workload, rng: random.Random) -> list[float]:
    """Poisson arrivals with a linearly rising rate (thinning)."""
    peak = max(w.rate_start, w.rate_end)
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= w.duration_s:
            return out
        rate = w.rate_start + (w.rate_end - w.rate_start) * t / w.duration_s
        if rng.random() < rate / peak:
            out.append(t)


def build_schedule(w: Workload, model: str) -> list[Arrival]:
    """Every request of the run, in arrival order."""
    rng = random.Random(w.seed)
    systems = [
        f"You are the assistant of customer {g}. Policies follow. " + _text(rng, w.prefix_words)
        for g in range(w.groups)
    ]
    histories: dict[tuple[int, int], list[dict[str, str]]] = {}
    out: list[Arrival] = []
    for i, at in enumerate(_times(w, rng)):
        g, u = rng.randrange(w.groups), rng.randrange(w.users)
        history = histories.setdefault((g, u), [])
        if len(history) >= 2 * w.max_turns:  # the user starts a new conversation
            history.clear()
        question = f"User {u} asks: " + _text(rng, w.question_words)
        system = systems[g] if w.shared else f"Request {i}. " + _text(rng, w.prefix_words)
        messages = [{"role": "system", "content": system}, *history,
                    {"role": "user", "content": question}]  # fmt: skip
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": w.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        out.append(Arrival(at, f"g{g}-u{u}", g, body))
        history.append({"role": "user", "content": question})
        history.append({"role": "assistant", "content": _text(rng, w.answer_words)})
    return out
