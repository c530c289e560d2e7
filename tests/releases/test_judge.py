"""The LLM-judge scorer: the official openai SDK asks a target (the simulator, echoing) and a
judge (a fake OpenAI-compatible server over real HTTP) that grades by reading the prompt it was
sent; the verdicts and the prompt template are what is checked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web

from fleetgate.errors import ConfigError
from fleetgate.releases.judge import judge_prompt, verdict
from fleetgate.releases.runner import EvalRunner, summarise
from fleetgate.releases.suites import EvalItem, parse_suite
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.tenancy.support import served


@asynccontextmanager
async def fake_judge(seen: list[dict[str, Any]]) -> AsyncIterator[str]:
    """PASS when the graded answer mentions Paris; no verdict at all for model 'mute'."""

    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"auth": request.headers.get("Authorization"), **body})
        prompt = body["messages"][-1]["content"]
        graded = prompt.split("Answer to grade:", 1)[-1]
        if body["model"] == "mute":
            text = "I would rather not say."
        else:
            text = "PASS: it names Paris." if "paris" in graded.lower() else "FAIL: wrong city."
        return web.json_response({
            "id": "judge-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    async with served(app) as url:
        yield url + "/v1"


SUITE = "\n".join(
    orjson.dumps(i).decode()
    for i in [
        {"id": "a", "prompt": "The capital of France is Paris", "scorer": "judge"},
        {"id": "b", "prompt": "The capital of France is Berlin", "scorer": "judge",
         "rejected": "Berlin", "comment": "wrong city"},
        {"id": "c", "prompt": "Paris again", "scorer": "judge", "judge": "mute"},
        {"id": "d", "prompt": "The capital of France is Paris", "expected": "Paris"},
    ]
)  # fmt: skip


async def test_a_judge_grades_answers_over_http() -> None:
    seen: list[dict[str, Any]] = []
    suite = parse_suite("judged.jsonl", SUITE)
    async with running_sim(SimConfig(mode="echo")) as sim, fake_judge(seen) as judge_url:
        runner = EvalRunner(sim + "/v1", "sk-target", judge="grader", judge_url=judge_url,
                            judge_key="sk-judge")  # fmt: skip
        try:
            outcomes = {o.item_id: o for o in await runner.run(suite, "tiny")}
        finally:
            await runner.aclose()
    assert outcomes["a"].score == 1.0 and outcomes["a"].passed, outcomes["a"]
    assert outcomes["b"].score == 0.0 and outcomes["b"].error is None, outcomes["b"]
    assert outcomes["c"].score == 0.0 and "no verdict" in (outcomes["c"].error or "")
    assert outcomes["d"].error is None  # the local scorer, no judge call
    assert len(seen) == 3 and {s["auth"] for s in seen} == {"Bearer sk-judge"}
    assert {s["model"] for s in seen} == {"grader", "mute"}
    rejected = next(s for s in seen if "Berlin" in s["messages"][0]["content"])
    text = rejected["messages"][0]["content"]
    assert "rejected by its user (they said: wrong city)" in text and text.count("Berlin") >= 2
    assert summarise(list(outcomes.values()))["error_rate"] == 0.25


async def test_without_a_judge_model_the_item_is_an_error() -> None:
    suite = parse_suite("j.jsonl", '{"id": "a", "prompt": "Paris", "scorer": "judge"}')
    async with running_sim(SimConfig(mode="echo")) as sim:
        runner = EvalRunner(sim + "/v1", "sk")
        try:
            (outcome,) = await runner.run(suite, "tiny")
        finally:
            await runner.aclose()
    assert outcome.score == 0 and "no judge model" in (outcome.error or "")


def test_prompt_template_and_verdicts() -> None:
    item = EvalItem.model_validate({
        "id": "x", "prompt": "2+2?", "expected": "4", "scorer": "judge",
        "judge_prompt": "Q={prompt} E={expected} A={answer}",
    })  # fmt: skip
    assert judge_prompt(item, "it is {prompt} 4") == "Q=2+2? E=4 A=it is {prompt} 4"
    assert verdict("PASS") == 1.0 and verdict("fail, because") == 0.0
    assert verdict("Score: 0.7") == 0.7 and verdict("score=8") == 0.8
    assert verdict("no idea") is None
    with pytest.raises(ConfigError, match="judge_prompt"):
        parse_suite("bad.jsonl", '{"id": "a", "prompt": "q", "scorer": "judge", '
                                 '"judge_prompt": "no answer slot"}')  # fmt: skip
