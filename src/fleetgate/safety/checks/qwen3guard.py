"""Client for Qwen3Guard-Gen behind an OpenAI-compatible ``/chat/completions`` endpoint.

Qwen3Guard-Gen (0.6B / 4B / 8B) is served as an ordinary chat model (``vllm serve
Qwen/Qwen3Guard-Gen-4B``, ``sglang>=0.4.6.post1`` or ``vllm>=0.9.0``); its chat template renders
the guard prompt, so fleetgate only sends the turns: the user turn for a prompt check, the
user turn and the assistant reply for a reply check. The answer, as the model card documents
it (https://huggingface.co/Qwen/Qwen3Guard-Gen-4B, https://github.com/QwenLM/Qwen3Guard
README "Quickstart" and "Deployment with SGLang and vLLM")::

    Safety: Unsafe                 Safety: Safe
    Categories: Violent            Categories: None
                                   Refusal: Yes      (reply checks only)

``Safety`` is ``Safe``, ``Unsafe`` or ``Controversial`` (the card: "content whose harmfulness
may be context-dependent or subject to disagreement across different applications"). The
option ``controversial`` says what a Controversial answer does: ``block`` (default) or
``allow``. Block is the default because it is how the Qwen3Guard repository scores its own
model (``eval/eval_gen.py`` counts ``Safety: Controversial`` as unsafe, the "strict" F1 its
README reports) and because this check usually runs last, on what cheaper stages could not
decide; ``allow`` is the card's looser reading for deployments that accept borderline content.

Scores: Safe 0.0, Controversial 0.5, Unsafe 1.0 (the endpoint's text gives no probability), so
a cascade stage with ``uncertain: [0.25, 0.75]`` sends Controversial on to a later stage.
Categories map to fleetgate's snake-case names (:data:`QWEN3GUARD_CATEGORIES`). A failed call
or an answer without a ``Safety:`` line is an ``error`` verdict with the check's ``on_error``,
counted in :attr:`Qwen3GuardCheck.failures`, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from fleetgate.resources.outbound import JsonService, OutboundHttp
from fleetgate.safety.base import Action, CheckContext, Verdict

__all__ = [
    "QWEN3GUARD_CATEGORIES",
    "Qwen3GuardAnswer",
    "Qwen3GuardCheck",
    "build_messages",
    "parse_output",
]

_BAD_ANSWER = (ValueError, KeyError, IndexError, TypeError)

# The card's category names (README "Safety Policy") -> verdict categories.
QWEN3GUARD_CATEGORIES: Mapping[str, str] = {
    "Violent": "violent",
    "Non-violent Illegal Acts": "non_violent_illegal",
    "Sexual Content or Sexual Acts": "sexual",
    "PII": "pii",
    "Suicide & Self-Harm": "self_harm",
    "Unethical Acts": "unethical",
    "Politically Sensitive Topics": "political",
    "Copyright Violation": "copyright",
    "Jailbreak": "jailbreak",  # prompts only
}

_BY_LOWER = {k.lower(): v for k, v in QWEN3GUARD_CATEGORIES.items()}
_SCORES = {"Safe": 0.0, "Controversial": 0.5, "Unsafe": 1.0}
# Tolerant of what servers and chat UIs do to the card's lines: leading blanks, markdown bold,
# a trailing full stop. `[ \t]` and not `\s`, so an empty field never takes the next line.
_FIELD = r"^[ \t>*_-]*{name}[ \t*_]*:[ \t*_]*"
_SAFETY = re.compile(_FIELD.format(name="Safety") + r"(Safe|Unsafe|Controversial)\b", re.I | re.M)
_CATEGORIES = re.compile(_FIELD.format(name="Categories") + r"([^\n]*)$", re.I | re.M)
_REFUSAL = re.compile(_FIELD.format(name="Refusal") + r"(Yes|No)\b", re.I | re.M)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.I | re.S)


@dataclass(frozen=True, slots=True)
class Qwen3GuardAnswer:
    """One parsed answer: ``label`` as the card spells it, the card's category names and, for a
    reply check, whether the reply is a refusal (None when the line is absent)."""

    label: Literal["Safe", "Unsafe", "Controversial"]
    categories: tuple[str, ...] = ()
    refusal: bool | None = None

    @property
    def score(self) -> float:
        return _SCORES[self.label]


def parse_output(text: str) -> Qwen3GuardAnswer:
    """The answer's fields; ValueError when it has no ``Safety:`` line. A ``<think>`` block is
    dropped first (a reasoning model's draft is not its answer); if the remaining text holds
    more than one ``Safety:`` line, the most severe label wins (Unsafe, then Controversial), so
    a repeated or self-correcting answer never reads as safer than any of its lines."""
    text = _THINK.sub("", text)
    labels = [m.capitalize() for m in _SAFETY.findall(text)]
    if not labels:
        raise ValueError(f"unexpected Qwen3Guard answer: {text[:80]!r}")
    label = max(labels, key=_SCORES.__getitem__)  # the pattern admits only the three labels
    cats: tuple[str, ...] = ()
    found = _CATEGORIES.search(text)
    if found is not None:
        names = [c.strip().strip("*_. ") for c in found.group(1).split(",")]
        cats = tuple(n for n in names if n and n.lower() != "none")
    refusal = _REFUSAL.search(text)
    return Qwen3GuardAnswer(
        label,
        cats,
        None if refusal is None else refusal.group(1).lower() == "yes",
    )


def _slug(name: str) -> str:
    """The verdict category of a card category; ``other`` for a name not on the card (verdict
    categories become metric labels: the model's free text must not mint new series)."""
    return QWEN3GUARD_CATEGORIES.get(name) or _BY_LOWER.get(name.lower(), "other")


def build_messages(text: str, ctx: CheckContext) -> list[dict[str, str]]:
    """The turns the server's Qwen3Guard template expects: ``[user]`` to moderate a prompt,
    ``[user, assistant]`` to moderate a reply (the newest user turn of ``ctx.history``; an empty
    one when there is none, so the template still renders response moderation)."""
    if ctx.role == "user":
        return [{"role": "user", "content": text}]
    user = next((t.content for t in reversed(ctx.history) if t.role == "user"), "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": text}]


class Qwen3GuardCheck:
    """Asks a Qwen3Guard-Gen model about the newest turn (``ctx.role``)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        controversial: Literal["block", "allow"] = "block",
        timeout_s: float = 10.0,
        max_tokens: int = 64,
        on_error: Action = Action.ALLOW,
        name: str = "qwen3guard",
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        if controversial not in ("block", "allow"):
            raise ValueError(f"controversial must be 'block' or 'allow', not {controversial!r}")
        self.name = name
        self.model = model
        self.controversial = Action(controversial)
        self.max_tokens = max_tokens
        self.on_error = on_error
        self.failures = 0
        self._http = JsonService(base_url, api_key=api_key, timeout_s=timeout_s, http=http)

    @staticmethod
    def _answer(body: Any) -> str:
        # Only the final text counts; a reasoning field the server may add is not the verdict.
        return str(body["choices"][0]["message"]["content"] or "")

    def _verdict(self, answer: Qwen3GuardAnswer) -> Verdict:
        cats = [_slug(c) for c in answer.categories]
        detail = f"{answer.label}: {', '.join(answer.categories) or 'no category'}"
        if answer.refusal is not None:
            detail += f"; refusal: {'yes' if answer.refusal else 'no'}"
        action = Action.ALLOW
        if answer.label == "Unsafe":
            action = Action.BLOCK
        elif answer.label == "Controversial":
            action = self.controversial
        if action is Action.BLOCK:
            return Verdict.block(self.name, cats or [answer.label.lower()],
                                 score=answer.score, detail=detail)  # fmt: skip
        return Verdict.allow(self.name, score=answer.score, detail=detail)

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        payload = {
            "model": self.model, "messages": build_messages(text, ctx),
            "temperature": 0, "max_tokens": self.max_tokens,
        }  # fmt: skip
        try:
            body = await self._http.post_json("/chat/completions", payload)
            answer = parse_output(self._answer(body))
        except (TimeoutError, aiohttp.ClientError, *_BAD_ANSWER) as exc:
            self.failures += 1
            return Verdict.failed(
                self.name, f"guard model failed: {exc!r}"[:300], action=self.on_error
            )
        return self._verdict(answer)
