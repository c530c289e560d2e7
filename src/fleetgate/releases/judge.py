"""The LLM-judge scorer: another model, behind any OpenAI-compatible endpoint, grades an answer.

The judge gets one user message, the item's ``judge_prompt`` (or `DEFAULT_PROMPT`) with
``{prompt}``, ``{answer}``, ``{expected}``, ``{rejected}`` and ``{comment}`` replaced, at
temperature 0, and its reply is read by `verdict`: ``PASS`` / ``FAIL`` (the first one named),
else ``score: x`` (0..1, or 0..10 scaled down), else no verdict (the item is an error, score 0).

Example::

    text = judge_prompt(item, answer="Paris.")
    verdict("PASS - the answer names Paris")   # 1.0
"""

from __future__ import annotations

import re

from fleetgate.releases.suites import EvalItem

__all__ = ["DEFAULT_PROMPT", "judge_prompt", "verdict"]

DEFAULT_PROMPT = """You are grading an AI assistant's answer.

Question:
{prompt}
{reference}{rejected_block}
Answer to grade:
{answer}

Reply with PASS if the answer is correct and helpful, or FAIL if it is not, then one sentence
saying why."""

_WORD = re.compile(r"\b(PASS|FAIL)\b", re.IGNORECASE)
_SCORE = re.compile(r"score\s*[:=]\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def _question(item: EvalItem) -> str:
    if item.prompt is not None:
        return item.prompt
    lines = []
    for m in item.chat_messages():
        content = m.get("content")
        if isinstance(content, list):  # multimodal parts: their text
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role', 'user')}: {content}")
    return "\n".join(lines)


def judge_prompt(item: EvalItem, answer: str) -> str:
    """The judge's prompt for ``answer`` to ``item``."""
    expected = "" if item.expected is None else str(item.expected)
    values = {
        "{prompt}": _question(item),
        "{answer}": answer,
        "{expected}": expected,
        "{rejected}": item.rejected or "",
        "{comment}": item.comment or "",
    }
    template = item.judge_prompt
    if template is None:
        reference = f"\nReference answer:\n{expected}\n" if expected else ""
        rejected = ""
        if item.rejected:
            said = f" (they said: {item.comment})" if item.comment else ""
            rejected = (
                f"\nAn earlier answer to this question was rejected by its user{said}:\n"
                f"{item.rejected}\nThe answer to grade fails if it repeats that problem.\n"
            )
        template = DEFAULT_PROMPT.replace("{reference}", reference).replace(
            "{rejected_block}", rejected
        )
    # one pass, left to right: a value that contains "{answer}" is not replaced again
    pattern = re.compile("|".join(re.escape(k) for k in values))
    return pattern.sub(lambda m: values[m.group()], template)


def verdict(reply: str) -> float | None:
    """The judge's verdict as a score in 0..1, or None when it gave none."""
    word = _WORD.search(reply)
    if word is not None:
        return 1.0 if word.group(1).upper() == "PASS" else 0.0
    number = _SCORE.search(reply)
    if number is not None:
        value = float(number.group(1))
        if value > 1:
            value /= 10
        return min(max(value, 0.0), 1.0)
    return None
