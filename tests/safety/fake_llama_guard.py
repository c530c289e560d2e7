"""A Llama Guard simulator: an OpenAI-compatible server that answers in Llama Guard's format.

``/v1/completions`` checks that the prompt is the Llama Guard prompt (task line, category
block, conversation, assessment line for the ``User`` or ``Agent`` role), takes the last turn of
that role and answers ``safe`` or ``unsafe\\nS<n>[,S<m>]`` by keyword rules; malformed prompts get
a 400. ``/v1/chat/completions`` judges the last message the same way (the server-side template
mode). ``fail=True`` answers 500 to everything.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("S1", ("kill ", "murder", "stab", "poison", "杀人", "投毒")),
    ("S2", ("ransomware", "phishing", "steal", "meth", "盗", "诈骗")),
    ("S4", ("child porn", "儿童色情")),
    ("S9", ("bomb", "explosive", "nerve gas", "炸弹", "炸药")),
    ("S10", ("subhuman", "劣等民族")),
    ("S11", ("suicide", "kill myself", "自杀")),
)

_ROLE = re.compile(r"Provide your safety assessment for ONLY THE LAST (User|Agent) message")
_CONVO = re.compile(r"<BEGIN CONVERSATION>\n\n(.*)\n\n<END CONVERSATION>", re.S)
_TURN = re.compile(r"^(User|Agent): ", re.M)


def judge(text: str) -> str:
    lowered = text.lower()
    codes = [code for code, words in RULES if any(w in lowered for w in words)]
    return "unsafe\n" + ",".join(codes) if codes else "safe"


def last_turn(prompt: str) -> tuple[str, str] | None:
    """``(role, content)`` of the judged turn, or None when the prompt is not Llama Guard's."""
    role = _ROLE.search(prompt)
    convo = _CONVO.search(prompt)
    if role is None or convo is None:
        return None
    if f"Task: Check if there is unsafe content in '{role.group(1)}' messages" not in prompt:
        return None
    if "<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes." not in prompt:
        return None
    parts = _TURN.split(convo.group(1))
    turns = [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]
    mine = [t for t in turns if t[0] == role.group(1)]
    return mine[-1] if mine else None


class FakeLlamaGuard:
    """Start with ``await start()`` (returns the ``/v1`` base URL), stop with ``await stop()``."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.prompts: list[str] = []
        self.judged: list[tuple[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _completions(self, request: web.Request) -> web.Response:
        if self.fail:
            return web.json_response({"error": {"message": "down"}}, status=500)
        body: dict[str, Any] = await request.json()
        prompt = str(body["prompt"])
        self.prompts.append(prompt)
        turn = last_turn(prompt)
        if turn is None:
            return web.json_response({"error": {"message": "not a Llama Guard prompt"}}, status=400)
        self.judged.append(turn)
        return web.json_response(
            {"object": "text_completion", "model": body.get("model"),
             "choices": [{"index": 0, "text": judge(turn[1]), "finish_reason": "stop"}]}
        )  # fmt: skip

    async def _chat(self, request: web.Request) -> web.Response:
        if self.fail:
            return web.json_response({"error": {"message": "down"}}, status=500)
        body: dict[str, Any] = await request.json()
        last = body["messages"][-1]
        self.judged.append(("User" if last["role"] == "user" else "Agent", last["content"]))
        message = {"role": "assistant", "content": judge(str(last["content"]))}
        return web.json_response(
            {"object": "chat.completion", "model": body.get("model"),
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )  # fmt: skip

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
