"""Quality per alias and version: abandonment (a cut stream with no follow-up in its session),
regeneration (the same last message again in a conversation), feedback and adoption events by
response id, groundedness samples and review scores; end to end, events and review sampling
through the gateway (a team that does not log payloads is never sampled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.http.serving import served
from fleetgate.insights.grounding import GroundednessScorer
from fleetgate.insights.quality import quality_report, record_event
from fleetgate.insights.tables import grounding, reviews
from fleetgate.insights.writer import write_rows
from tests.insights.test_feature import _gateway, upstream  # noqa: F401 (fixture)
from tests.insights.test_grounding import _Unit
from tests.tenancy.support import Gateway, migrated_database

T0 = 1_780_000_000_000


def _row(n: int, at_s: float, **fields: Any) -> dict[str, Any]:
    row = {
        "request_id": f"r{n}", "created_ms": T0 + int(at_s * 1000), "day": T0 // 86_400_000,
        "team_id": "t", "key_id": "k", "end_user": "u", "session_id": None,
        "conversation_id": None, "plan": "free", "alias": "chat", "version": "v1",
        "status": 200, "stream": 1, "finish_reason": "stop", "response_id": f"resp-{n}",
        "prompt_hash": f"p{n}", "input_tokens": 1, "output_tokens": 1, "cost_nusd": 1,
    }  # fmt: skip
    return {**row, **fields}


async def test_the_report_counts_each_signal_by_version(tmp_path: Path) -> None:
    rows = [
        _row(1, 0, session_id="s1", status=499),  # cut, followed 30 s later: not abandoned
        _row(2, 30, session_id="s1"),
        _row(3, 40, session_id="s2", status=499),  # cut, next in its session after 10 min
        _row(4, 640, session_id="s2"),
        _row(5, 50, status=499),  # cut, no session: abandoned
        _row(6, 60, session_id="s3", status=499, stream=0),  # not streamed: not counted
        _row(7, 70, conversation_id="c1", prompt_hash="same"),
        _row(8, 80, conversation_id="c1", prompt_hash="same"),  # regenerated
        _row(9, 90, conversation_id="c1", prompt_hash="other"),
        _row(10, 100, conversation_id="c2", prompt_hash="same"),  # another conversation
        _row(11, 110, version="v2", session_id="s9", status=499),  # cut, never followed
    ]
    async with migrated_database("sqlite", tmp_path) as db:
        async with db.engine.begin() as conn:
            await write_rows(db, conn, rows, ())
            for rid, value in (("r1", "up"), ("r2", "down"), ("r2", "up"), ("r7", "accepted"),
                               ("r8", "rejected"), ("r9", "edited")):  # fmt: skip
                answer = {"request_id": rid, "team_id": "t", "alias": "chat", "version": "v1",
                          "created_ms": T0}  # fmt: skip
                await record_event(conn, db.dialect, answer, value)
            await conn.execute(grounding.insert(), [
                {"sample_id": f"g{i}", "created_ms": T0, "team_id": "t", "alias": "chat",
                 "version": "v1", "score": 0.9 if i < 3 else 0.2, "grounded": int(i < 3)}
                for i in range(4)
            ])  # fmt: skip
            await conn.execute(reviews.insert(), [
                {"request_id": "r1", "created_ms": T0, "team_id": "t", "alias": "chat",
                 "version": "v1", "score": 4.0},
                {"request_id": "r2", "created_ms": T0, "team_id": "t", "alias": "chat",
                 "version": "v1", "score": 3.0},
                {"request_id": "r3", "created_ms": T0, "team_id": "t", "alias": "chat",
                 "version": "v1", "score": None},
            ])  # fmt: skip
        async with db.engine.connect() as conn:
            report = await quality_report(conn, T0, T0 + 86_400_000, None, 120.0)
    v1, v2 = report
    assert (v1["version"], v2["version"]) == ("v1", "v2")
    assert v1["requests"] == 10 and v1["streamed"] == 9
    assert v1["abandoned"] == 2 and v1["abandonment_rate"] == pytest.approx(2 / 9)
    assert v1["regenerated"] == 1
    assert (v1["feedback_up"], v1["feedback_down"]) == (2, 0)  # r2's last word was "up"
    assert (v1["accepted"], v1["edited"], v1["rejected"]) == (1, 1, 1)
    assert v1["adoption_rate"] == pytest.approx(2 / 3)
    assert v1["hallucination_rate"] == pytest.approx(0.25)
    assert v1["reviews_scored"] == 2 and v1["review_score"] == pytest.approx(3.5)
    assert v2["abandoned"] == 1 and v2["review_score"] is None


async def _chat(gw: Gateway, key: str) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


async def _post(gw: Gateway, path: str, key: str, body: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with gw.session.post(gw.url + path, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_events_reviews_and_grounding_through_the_gateway(
    upstream: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    app = await _gateway(upstream, tmp_path, {"review_share": {"tiny": 1.0}})
    async with served(app) as url, aiohttp.ClientSession() as session:
        gw = Gateway(url, app, session)
        quiet, _, quiet_key = await gw.team_and_key("quiet")
        loud, _, loud_key = await gw.team_and_key("loud", team_fields={"log_payloads": True})
        feature = next(f for f in app[GATEWAY].features.all if f.name == "insights")
        feature._scorer = GroundednessScorer(_Unit())  # type: ignore[arg-type]
        answer = await _chat(gw, loud_key)
        await _chat(gw, quiet_key)
        rid = answer["id"]
        assert await _post(gw, "/v1/insights/events", loud_key,
                           {"response_id": rid, "event": "accepted"}) == (200, {
            "object": "insights.event", "response_id": rid, "event": "accepted",
            "alias": "tiny"})  # fmt: skip
        status, _ = await _post(gw, "/v1/insights/events", quiet_key,
                                {"response_id": rid, "event": "up"})  # fmt: skip
        assert status == 404  # another team's answer
        status, bad = await _post(gw, "/v1/insights/events", loud_key,
                                  {"response_id": rid, "event": "love"})  # fmt: skip
        assert status == 400 and bad["error"]["param"] == "event"
        status, got = await _post(gw, "/v1/insights/grounding", loud_key, {
            "response_id": rid, "answer": "The warranty lasts 5 years here.",
            "documents": ["The warranty lasts 2 years here."]})  # fmt: skip
        assert status == 200 and got["sampled"] and not got["grounded"]
        status, _ = await _post(
            gw,
            "/v1/insights/grounding",
            loud_key,
            {"response_id": rid, "answer": "x", "documents": "no"},
        )
        assert status == 400

        status, queue = await gw.admin("GET", "/admin/insights/reviews?scored=false")
        assert status == 200 and queue["rubric"] == ["correct", "helpful", "safe"]
        assert [r["team_id"] for r in queue["data"]] == [loud]  # quiet: never sampled
        item = queue["data"][0]
        assert item["prompt"] == [{"role": "user", "content": "hi"}] and item["response"]
        path = f"/admin/insights/reviews/{item['request_id']}"
        status, bad = await gw.admin("POST", path, json={"scores": {"correct": 9}})
        assert status == 400
        status, done = await gw.admin(
            "POST", path, json={"scores": {"correct": 4, "helpful": 5, "safe": 3}}
        )
        assert status == 200 and done["score"] == 4.0
        status, _ = await gw.admin(
            "POST",
            "/admin/insights/reviews/nope",
            json={"scores": {"correct": 4, "helpful": 5, "safe": 3}},
        )
        assert status == 404

        status, report = await gw.admin("GET", "/admin/insights/quality")
        assert status == 200
        (row,) = report["data"]
        assert row["alias"] == "tiny" and row["requests"] == 2
        assert row["accepted"] == 1 and row["adoption_rate"] == 1.0
        assert row["review_score"] == 4.0 and row["hallucination_rate"] == 1.0
