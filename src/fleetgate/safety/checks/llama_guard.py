"""Client for a Llama Guard 3 or 4 model behind any OpenAI-compatible endpoint (vLLM, SGLang, ...).

Two ways to ask:

- ``mode="completions"`` (default): fleetgate renders Meta's prompt itself (the model card's
  format: task line naming the ``User`` or ``Agent`` role, the S1-S14 category block, the
  conversation as ``User:`` / ``Agent:`` turns, the assessment instruction) and POSTs it to
  ``/completions``; custom category lists work here.
- ``mode="chat"``: POSTs the turns to ``/chat/completions`` and lets the server's Llama Guard chat
  template render the prompt.

The answer is ``safe`` or ``unsafe`` followed by a line of comma-separated codes, e.g.
``unsafe\\nS1,S10``. A failed call (connect error, timeout, bad status, unparseable answer) is
returned as an ``error`` verdict, counted in :attr:`LlamaGuardCheck.failures`, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aiohttp

from fleetgate.resources.outbound import JsonService, OutboundHttp
from fleetgate.safety.base import Action, CheckContext, TextTurn, Verdict

_BAD_ANSWER = (ValueError, KeyError, IndexError, TypeError)

__all__ = [
    "LLAMA_GUARD_CATEGORIES",
    "LlamaGuardCheck",
    "build_prompt",
    "parse_output",
]

# MLCommons hazard taxonomy as used by Llama Guard 3 and 4.
LLAMA_GUARD_CATEGORIES: Mapping[str, str] = {
    "S1": "Violent Crimes.",
    "S2": "Non-Violent Crimes.",
    "S3": "Sex Crimes.",
    "S4": "Child Exploitation.",
    "S5": "Defamation.",
    "S6": "Specialized Advice.",
    "S7": "Privacy.",
    "S8": "Intellectual Property.",
    "S9": "Indiscriminate Weapons.",
    "S10": "Hate.",
    "S11": "Self-Harm.",
    "S12": "Sexual Content.",
    "S13": "Elections.",
    "S14": "Code Interpreter Abuse.",
}

_SPECIAL = {
    3: ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n",
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    4: ("<|begin_of_text|><|header_start|>user<|header_end|>\n\n",
        "<|eot|><|header_start|>assistant<|header_end|>\n\n"),
}  # fmt: skip

_CODE = re.compile(r"^S\d{1,2}$")


def _speaker(role: str) -> str:
    return "User" if role == "user" else "Agent"


def build_prompt(
    turns: Sequence[TextTurn],
    *,
    version: Literal[3, 4] = 3,
    categories: Mapping[str, str] = LLAMA_GUARD_CATEGORIES,
) -> str:
    """Meta's Llama Guard prompt judging the last turn (``User`` or ``Agent``) in context."""
    if not turns:
        raise ValueError("Llama Guard needs at least one turn")
    role = _speaker(turns[-1].role)
    head, tail = _SPECIAL[version]
    cats = "\n".join(f"{code}: {desc}" for code, desc in categories.items())
    convo = "\n\n".join(f"{_speaker(t.role)}: {t.content}" for t in turns)
    return (
        f"{head}Task: Check if there is unsafe content in '{role}' messages in conversations "
        "according our safety policy with the below categories.\n\n"
        f"<BEGIN UNSAFE CONTENT CATEGORIES>\n{cats}\n<END UNSAFE CONTENT CATEGORIES>\n\n"
        f"<BEGIN CONVERSATION>\n\n{convo}\n\n<END CONVERSATION>\n\n"
        f"Provide your safety assessment for ONLY THE LAST {role} message in the above "
        "conversation:\n - First line must read 'safe' or 'unsafe'.\n"
        " - If unsafe, a second line must include a comma-separated list of violated categories."
        f"{tail}"
    )


def parse_output(text: str) -> tuple[bool, list[str]]:
    """``(unsafe, codes)`` from a Llama Guard answer; ValueError if it is neither form."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        raise ValueError("empty Llama Guard answer")
    first = lines[0].lower()
    if first == "safe":
        return False, []
    if first != "unsafe":
        raise ValueError(f"unexpected Llama Guard answer: {text[:80]!r}")
    codes = [c.strip().upper() for c in lines[1].split(",")] if len(lines) > 1 else []
    return True, [c for c in codes if _CODE.match(c)]


class LlamaGuardCheck:
    """Asks a Llama Guard model about the newest turn (``ctx.role``) after ``ctx.history``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        version: Literal[3, 4] = 3,
        mode: Literal["completions", "chat"] = "completions",
        categories: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        on_error: Action = Action.ALLOW,
        name: str = "llama_guard",
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        self.name = name
        self.model = model
        self.version = version
        self.mode = mode
        self.categories = dict(categories or LLAMA_GUARD_CATEGORIES)
        self.on_error = on_error
        self.failures = 0
        self._http = JsonService(base_url, api_key=api_key, timeout_s=timeout_s, http=http)

    def _request(self, turns: Sequence[TextTurn]) -> tuple[str, dict[str, Any]]:
        if self.mode == "chat":
            messages = [{"role": t.role, "content": t.content} for t in turns]
            return "/chat/completions", {
                "model": self.model, "messages": messages, "temperature": 0, "max_tokens": 20,
            }  # fmt: skip
        prompt = build_prompt(turns, version=self.version, categories=self.categories)
        return "/completions", {
            "model": self.model, "prompt": prompt, "temperature": 0, "max_tokens": 20,
        }  # fmt: skip

    @staticmethod
    def _answer(body: Any) -> str:
        choice = body["choices"][0]
        if "message" in choice:
            return str(choice["message"]["content"] or "")
        return str(choice["text"])

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        turns = [*ctx.history, TextTurn(ctx.role, text)]
        path, payload = self._request(turns)
        try:
            body = await self._http.post_json(path, payload)
            unsafe, codes = parse_output(self._answer(body))
        except (TimeoutError, aiohttp.ClientError, *_BAD_ANSWER) as exc:
            self.failures += 1
            return Verdict.failed(
                self.name, f"guard model failed: {exc!r}"[:300], action=self.on_error
            )
        if not unsafe:
            return Verdict.allow(self.name)
        names = ", ".join(self.categories.get(c, c).rstrip(".") for c in codes)
        return Verdict.block(self.name, codes or ["unsafe"], detail=names or "unsafe")
