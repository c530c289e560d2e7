"""Client for a policy-following guard model (gpt-oss-safeguard and the like) behind an
OpenAI-compatible ``/chat/completions`` endpoint.

The operator writes the policy (option ``policy``, or ``policy_file``); it goes as the system
message and the text to classify as the user message, as the gpt-oss-safeguard user guide
describes for vLLM and other chat servers (OpenAI cookbook, "User guide for gpt-oss-safeguard",
https://cookbook.openai.com/articles/gpt-oss-safeguard-guide, sections "Understanding the Harmony
Response Format" and "Designing reliable output instructions"). The policy's own output
instructions say how the model answers; the two formats the guide recommends are read:

- a bare label, ``0`` (no violation) or ``1`` (violation);
- a JSON object ``{"violation": 1, "policy_category": "H2.f", ...}`` (``policy_category`` may be
  null; ``rationale`` and other fields are kept for the verdict's detail only). A Markdown code
  fence around it is tolerated.

The model reasons before it answers; servers return that reasoning in a separate field
(vLLM: ``reasoning_content`` or ``reasoning``). Only ``content`` decides: the reasoning may quote
the policy's labels while weighing them. ``reasoning_effort`` (``low|medium|high``) is passed
through when set; ``max_tokens`` is unset by default, as the guide advises not capping a
reasoning model's output (a capped model may stop before its answer: an error verdict).

Scores are 1.0 (violation) and 0.0: the answer carries no probability. A failed call or an
answer in neither format is an ``error`` verdict with the check's ``on_error``, counted in
:attr:`PolicyGuardCheck.failures`, never raised.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.resources.outbound import JsonService, OutboundHttp
from fleetgate.safety.base import Action, CheckContext, Verdict

__all__ = ["PolicyAnswer", "PolicyGuardCheck", "load_policy", "parse_output"]

_BAD_ANSWER = (ValueError, KeyError, IndexError, TypeError)
_FENCE = re.compile(r"```[a-zA-Z]*[ \t]*\n?(.*?)\n?```", re.S)
_LEADING_LABEL = re.compile(r"^([01])(?:\s|$)")
_CATEGORY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_EFFORTS = ("low", "medium", "high")


class PolicyAnswer:
    """A parsed answer: ``violation``, the policy's category (None if not given) and a short
    rationale (empty if not given)."""

    __slots__ = ("category", "rationale", "violation")

    def __init__(self, violation: bool, category: str | None = None, rationale: str = "") -> None:
        self.violation = violation
        self.category = category
        self.rationale = rationale


def _label(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
        return value.strip().lower() in ("1", "true")
    raise ValueError(f"violation must be 0 or 1, not {value!r}")


def parse_output(text: str) -> PolicyAnswer:
    """The decision in a bare ``0``/``1`` (an explanation may follow it) or a ``{"violation":
    ...}`` JSON object (bare, fenced, or the first object in the text; text may follow it);
    ValueError for anything else (including an empty answer). ``policy_category`` is kept
    only when it looks like a policy code (letters, digits, ``._-``, at most 64): categories
    become metric labels, and a model's free text must not mint new series."""
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    leading = _LEADING_LABEL.match(body)
    if leading:
        return PolicyAnswer(leading.group(1) == "1")
    start = body.find("{")
    try:
        if start < 0:
            raise json.JSONDecodeError("no JSON object", body, 0)
        data, _ = json.JSONDecoder().raw_decode(body, start)
    except json.JSONDecodeError:
        raise ValueError(f"unexpected policy guard answer: {text[:80]!r}") from None
    if not isinstance(data, dict) or "violation" not in data:
        raise ValueError(f"policy guard JSON has no 'violation': {text[:80]!r}")
    category = data.get("policy_category")
    rationale = data.get("rationale")
    code = str(category).strip() if category not in (None, "") else None
    return PolicyAnswer(
        _label(data["violation"]),
        code if code and _CATEGORY.match(code) else None,
        str(rationale)[:200] if rationale else "",
    )


def load_policy(policy: str | None, policy_file: str | Path | None) -> str:
    """The policy text from exactly one of the two options; ValueError otherwise."""
    if policy is not None and policy_file is not None:
        raise ValueError("set either 'policy' or 'policy_file', not both")
    if policy_file is not None:
        try:
            policy = Path(policy_file).read_text("utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read policy_file {str(policy_file)!r}: {exc}") from exc
    if policy is None:
        raise ValueError("a policy guard needs 'policy' (the policy text) or 'policy_file'")
    if not policy.strip():
        raise ValueError("the policy text is empty")
    return policy


class PolicyGuardCheck:
    """Asks a policy-following guard model whether ``text`` violates the operator's policy."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        policy: str | None = None,
        policy_file: str | Path | None = None,
        api_key: str | None = None,
        reasoning_effort: str | None = None,
        timeout_s: float = 30.0,
        max_tokens: int | None = None,
        on_error: Action = Action.ALLOW,
        name: str = "policy_guard",
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        if reasoning_effort is not None and reasoning_effort not in _EFFORTS:
            raise ValueError(
                f"reasoning_effort must be one of {_EFFORTS}, not {reasoning_effort!r}"
            )
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name, not {model!r}")
        if policy is not None and not isinstance(policy, str):
            raise ValueError("policy must be text (or use policy_file)")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        self.name = name
        self.model = model
        self.policy = load_policy(policy, policy_file)
        # A policy file edited in place is read again on the next check (a reload with the same
        # options keeps this check object, so the file is watched here).
        self._policy_file = Path(policy_file) if policy_file is not None else None
        self._policy_mtime = self._mtime()
        self.reasoning_effort = reasoning_effort
        self.max_tokens = max_tokens
        self.on_error = on_error
        self.failures = 0
        self._http = JsonService(base_url, api_key=api_key, timeout_s=timeout_s, http=http)

    def _mtime(self) -> int | None:
        if self._policy_file is None:
            return None
        try:
            return self._policy_file.stat().st_mtime_ns
        except OSError:
            return None

    def _current_policy(self) -> str:
        """The policy text, read again when the policy file's mtime changed (a file that
        cannot be read or is empty now keeps the last good text)."""
        mtime = self._mtime()
        if mtime is not None and mtime != self._policy_mtime:
            self._policy_mtime = mtime
            try:
                self.policy = load_policy(None, self._policy_file)
            except ValueError:
                pass
        return self.policy

    def _payload(self, text: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": self._current_policy()},
                {"role": "user", "content": text},
            ],
            "temperature": 0,
        }
        if self.reasoning_effort is not None:
            payload["reasoning_effort"] = self.reasoning_effort
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        return payload

    @staticmethod
    def _answer(body: Any) -> str:
        # ``content`` only: ``reasoning_content`` / ``reasoning`` are the model's deliberation.
        content = body["choices"][0]["message"]["content"]
        if not content:
            raise ValueError("the guard model gave no final answer (only reasoning?)")
        return str(content)

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        try:
            body = await self._http.post_json("/chat/completions", self._payload(text))
            answer = parse_output(self._answer(body))
        except (TimeoutError, aiohttp.ClientError, *_BAD_ANSWER) as exc:
            self.failures += 1
            return Verdict.failed(
                self.name, f"policy guard failed: {exc!r}"[:300], action=self.on_error
            )
        detail = answer.category or ("violation" if answer.violation else "no violation")
        if answer.rationale:
            detail = f"{detail}: {answer.rationale}"[:300]
        if not answer.violation:
            return Verdict.allow(self.name, score=0.0, detail=detail)
        return Verdict.block(self.name, [answer.category or "policy_violation"],
                             score=1.0, detail=detail)  # fmt: skip
