"""Guard-model simulators: OpenAI-compatible ``/v1/chat/completions`` servers on 127.0.0.1
that answer in Qwen3Guard-Gen's or a policy model's format.

``qwen3guard_answer`` renders the model card's lines (``Safety:``, ``Categories:``, and for a
reply ``Refusal:``) from keyword rules; ``policy_answer`` answers per the policy's output
instructions (a bare ``0``/``1`` when the policy asks for one character, the JSON object
otherwise) and puts its deliberation in ``reasoning_content``, as vLLM serves gpt-oss models.
``answer=`` overrides the reply text; ``delay_s`` makes every answer late; ``fail`` answers 500.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

Answer = Callable[[list[dict[str, Any]]], tuple[str, str | None]]
"""``answer(messages) -> (content, reasoning_content or None)``."""

QWEN_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Unsafe", "Violent", ("bomb", "kill ", "炸弹")),
    ("Unsafe", "Non-violent Illegal Acts", ("ransomware", "steal")),
    ("Unsafe", "Suicide & Self-Harm", ("kill myself", "自杀")),
    ("Controversial", "Politically Sensitive Topics", ("election fraud",)),
    ("Unsafe", "Jailbreak", ("ignore all previous instructions",)),
)


def qwen3guard_answer(messages: list[dict[str, Any]]) -> tuple[str, str | None]:
    last = messages[-1]
    text = str(last["content"]).lower()
    hits = [(label, cat) for label, cat, words in QWEN_RULES if any(w in text for w in words)]
    label = "Safe"
    if hits:
        label = "Unsafe" if any(h[0] == "Unsafe" for h in hits) else "Controversial"
    cats = ", ".join(c for _, c in hits) or "None"
    lines = [f"Safety: {label}", f"Categories: {cats}"]
    if last["role"] == "assistant":
        refused = "i can't help" in text or "unable to fulfill" in text
        lines.append(f"Refusal: {'Yes' if refused else 'No'}")
    return "\n".join(lines), None


def policy_answer(messages: list[dict[str, Any]]) -> tuple[str, str | None]:
    policy = str(messages[0]["content"])
    text = str(messages[-1]["content"]).lower()
    spam = "buy now" in text or "click here" in text
    # The reasoning names the other label on purpose: a client reading it would flip.
    reasoning = (
        f"The policy defines spam. Label 1 if it is; {'1' if not spam else '0'} seemed "
        "plausible at first, but the final label follows the definition."
    )
    if "exactly one character" in policy:
        return ("1" if spam else "0"), reasoning
    data = {"violation": int(spam), "policy_category": "SP2.a" if spam else None}
    if spam:
        data["rationale"] = "unsolicited promotion"
    return json.dumps(data), reasoning


class FakeChatGuard:
    """Start with ``await start()`` (returns the ``/v1`` base URL), stop with ``await stop()``."""

    def __init__(
        self,
        answer: Answer,
        *,
        fail: bool = False,
        delay_s: float = 0.0,
        reply: str | None = None,
    ) -> None:
        self.answer = answer
        self.fail = fail
        self.delay_s = delay_s
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None

    @property
    def judged(self) -> list[str]:
        """The text of the newest message of every request, in order."""
        return [str(r["messages"][-1]["content"]) for r in self.requests]

    async def _chat(self, request: web.Request) -> web.Response:
        if self.fail:
            return web.json_response({"error": {"message": "down"}}, status=500)
        body: dict[str, Any] = await request.json()
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        content, reasoning = self.answer(body["messages"])
        if self.reply is not None:
            content = self.reply
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        return web.json_response(
            {"object": "chat.completion", "model": body.get("model"),
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )  # fmt: skip

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
