"""End to end: a starved `critical` request cancels a `batch` stream in flight.

One simulated engine, a pool of one slot (``max_num_seqs: 1``). The batch stream gets a clean,
retryable end (an OpenAI error event with ``preempted_in_flight``, then ``[DONE]``), its
outcome is billed for the chunks it received, and the critical request's admission is in the
routing decision log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.feature import StageFeature
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.scheduling.support import Outcomes, reloadable_gateway, sse_events
from tests.tenancy.support import MASTER, Gateway


async def _stream(gw: Gateway, key: str) -> list[Any]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "a long story"}],
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200
        return await sse_events(r)


def _one_pool(url: str, slots: int) -> dict[str, Any]:
    """A gateway config: alias ``tiny`` on the simulator at ``url``, a pool of ``slots``."""
    dep = {"model": "tiny", "api_base": f"{url}/v1", "max_num_seqs": slots}
    return {"models": [{"alias": "tiny", "deployments": [dep]}], "health": {"probe_interval_s": 30}}


@asynccontextmanager
async def _claims_gateway(
    tmp_path: Path,
    url: str,
    pool_slots: int,
    outcomes: Outcomes,
    scheduling: dict[str, Any] | None = None,
) -> AsyncIterator[Gateway]:
    """A gateway in front of the simulator at ``url``: one pool of ``pool_slots``, the
    ``scheduling`` section (default: claims preempting lower bands' streams,
    ``preempt_streams_for_claims: lower_band``), ``outcomes`` seeing what is billed."""
    config = GatewayConfig.model_validate(
        {
            **_one_pool(url, pool_slots),
            "scheduling": scheduling or {"preempt_streams_for_claims": "lower_band"},
        }
    )
    settings = Settings(master_key=MASTER, data_dir=tmp_path, watch_config=False)
    app = create_app(settings, config, extra=[StageFeature(outcomes)])
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        async with aiohttp.ClientSession() as session:
            yield Gateway(f"http://127.0.0.1:{runner.addresses[0][1]}", runner.app, session)
    finally:
        await runner.cleanup()


async def test_a_starved_critical_request_cancels_a_batch_stream_cleanly(tmp_path: Path) -> None:
    sim = SimConfig(decode_ms_per_step=5.0, output_len=400, max_num_seqs=4)
    outcomes = Outcomes()
    async with running_sim(sim) as url:
        starved = {"preempt_in_flight_after_s": 0.1}
        async with _claims_gateway(tmp_path, url, 1, outcomes, starved) as gw:
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            crit_team, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            stream = asyncio.create_task(_stream(gw, batch))
            await asyncio.sleep(0.3)  # the stream holds the pool's one slot
            status, _, answer = await gw.chat(crit, max_tokens=4)
            assert status == 200, answer
            events = await asyncio.wait_for(stream, 10)
            status, found = await gw.admin(
                "GET", "/admin/routing/decisions?alias=tiny&limit=50", MASTER
            )
    assert events[-1] == "[DONE]"
    error = events[-2]["error"]
    assert error["code"] == "preempted_in_flight" and error["type"] == "service_unavailable"
    content = [e for e in events[:-2] if e.get("choices")]
    assert 0 < len(content) < 400  # cut short, after some output
    billed = {team: o for team, o in outcomes.seen}
    cut = billed[batch_team]
    assert cut.status == 503 and cut.error_type is not None
    assert cut.deployment is not None and cut.completion_tokens == cut.relayed == len(content)
    assert billed[crit_team].status == 200
    assert status == 200
    scheduling = [d for d in found["data"] if d["strategy"] == "scheduling"]
    reasons = {d["reason"]: d for d in scheduling}
    assert reasons["preempted_in_flight"]["tenant"] == batch_team
    admitted = reasons["admitted"]
    assert admitted["tenant"] == crit_team and admitted["admission"]["band"] == "critical"
    assert admitted["admission"]["wait_s"] >= 0.1


async def test_an_owner_reclaims_its_quota_from_a_borrower_over_http(tmp_path: Path) -> None:
    """Quotas set by a config reload (the teams' ids come from the admin API): b fills the
    pool of 2 and queues 4 more; a (nominal 1, like b) arrives with 2: a's first takes the
    next free slot ahead of b's queue, and so does its second once the first has ended,
    though b's weight of 100 keeps b's counter far below a's."""
    sim = SimConfig(decode_ms_per_step=5.0, output_len=40, max_num_seqs=2)
    async with running_sim(sim) as url:
        config = _one_pool(url, 2)
        async with reloadable_gateway(tmp_path, config) as gateway:
            gw = gateway.gw
            team_a, _, key_a = await gw.team_and_key("owner")
            team_b, _, key_b = await gw.team_and_key("borrower")
            quota = {"concurrency": {"nominal": 1}}
            config["scheduling"] = {
                "orgs": {"lab": {}},
                "teams": {
                    team_a: {"org": "lab", "quota": quota},
                    team_b: {"quota": quota, "weight": 100},  # counters favour b by far
                },
            }
            await gateway.reload(config)
            done: list[str] = []

            async def one(name: str, key: str) -> None:
                status, _, answer = await gw.chat(key, max_tokens=40)
                assert status == 200, answer
                done.append(name)

            flood = [asyncio.create_task(one("b", key_b)) for _ in range(6)]
            await asyncio.sleep(0.08)  # b's two run (about 0.2 s each), four queue
            _, queues = await gw.admin("GET", "/admin/queues")
            (pool,) = queues["data"]
            assert pool["quotas"][f"team:{team_b}"]["in_flight"] == 2  # borrowing a's
            owner = [asyncio.create_task(one("a", key_a)) for _ in range(2)]
            await asyncio.wait_for(asyncio.gather(*flood, *owner), 30)
            status, found = await gw.admin(
                "GET", "/admin/routing/decisions?reason=admitted&limit=100"
            )
    # b's two running end first; the next slot is a's. While a's first runs its second would
    # borrow (b's far lower counter wins); once a's first ends, a is under its nominal again
    # and its second takes the next slot, ahead of b's queue. Without the quotas (the counters
    # alone, b at weight 100) a's second ends last: checked by hand.
    assert done[2] == "a" and done[:5].count("a") == 2, done
    admitted = {d["tenant"]: d["admission"]["quota"] for d in found["data"]}
    assert set(admitted) == {team_a, team_b}


async def test_a_critical_claim_cancels_a_batch_stream_and_the_engine_frees_its_slot(
    tmp_path: Path,
) -> None:
    """``preempt_streams_for_claims``: the engine has one slot, held by a batch stream. A
    critical request queues in the gateway and at once (no starvation wait) cancels the
    stream: its client gets the retryable error, its outcome is billed for what it received,
    and the gateway's closing of the upstream stream aborts the request in the engine, whose
    slot the critical request then runs in."""
    sim = SimConfig(decode_ms_per_step=5.0, output_len=400, max_num_seqs=1)
    outcomes = Outcomes()
    async with running_sim(sim) as url:
        async with _claims_gateway(tmp_path, url, 1, outcomes) as gw:
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            crit_team, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            stream = asyncio.create_task(_stream(gw, batch))
            await asyncio.sleep(0.3)  # the stream holds the engine's one slot
            status, _, answer = await gw.chat(crit, max_tokens=4)
            events = await asyncio.wait_for(stream, 10)
            async with gw.session.get(f"{url}/sim/stats") as r:
                stats = await r.json()
            _, found = await gw.admin("GET", "/admin/routing/decisions?alias=tiny&limit=50")
    assert status == 200, answer
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "preempted_in_flight"
    content = [e for e in events[:-2] if e.get("choices")]
    assert 0 < len(content) < 400
    assert stats["requests_cancelled"] == 1  # the engine aborted the cut stream
    billed = {team: o for team, o in outcomes.seen}
    assert billed[batch_team].status == 503
    assert billed[batch_team].completion_tokens == len(content)
    assert billed[crit_team].status == 200 and billed[crit_team].completion_tokens == 4
    reasons = {d["reason"]: d for d in found["data"] if d["strategy"] == "scheduling"}
    assert reasons["preempted_in_flight"]["tenant"] == batch_team
    assert reasons["admitted"]["tenant"] == crit_team


async def test_a_stream_preempted_before_its_first_byte_is_requeued_transparently(
    tmp_path: Path,
) -> None:
    """The engine has one slot and the pool two: the first batch stream runs, the second waits
    in the engine with nothing sent. A critical request queues and cancels the second (the
    one that sent the least): the engine drops it, and since its client has had no byte it
    goes back to the gateway's queue instead of failing, and is answered in full once a slot
    frees (after the critical request). The running stream is left alone."""
    sim = SimConfig(decode_ms_per_step=5.0, output_len=200, max_num_seqs=1)
    outcomes = Outcomes()
    async with running_sim(sim) as url:
        async with _claims_gateway(tmp_path, url, 2, outcomes) as gw:
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            crit_team, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            running = asyncio.create_task(_stream(gw, batch))
            await asyncio.sleep(0.2)  # it holds the engine's slot
            waiting = asyncio.create_task(_stream(gw, batch))
            await asyncio.sleep(0.2)  # admitted by the pool, waiting in the engine
            status, _, answer = await gw.chat(crit, max_tokens=4)
            requeued = await asyncio.wait_for(waiting, 20)
            events = await asyncio.wait_for(running, 10)
            async with gw.session.get(f"{url}/sim/stats") as r:
                stats = await r.json()
            _, found = await gw.admin("GET", "/admin/routing/decisions?alias=tiny&limit=50")
    assert status == 200, answer
    for stream in (events, requeued):  # both complete, neither saw an error
        assert stream[-1] == "[DONE]" and all("error" not in e for e in stream[:-1])
        assert len([e for e in stream[:-1] if e.get("choices")]) >= 400
    assert stats["requests_cancelled"] == 1  # the engine dropped the waiting one once
    assert [o.status for _, o in outcomes.seen] == [200, 200, 200]  # billed once each
    assert {t for t, _ in outcomes.seen} == {batch_team, crit_team}
    reasons = [(d["reason"], d["tenant"]) for d in found["data"] if d["strategy"] == "scheduling"]
    assert ("requeued", batch_team) in reasons  # cancelled, then queued again: not a shed
    assert ("preempted_in_flight", batch_team) not in reasons
    assert ("admitted", batch_team) in reasons


async def test_a_claim_over_the_limit_reaches_the_engine_after_the_stream_it_cut(
    tmp_path: Path,
) -> None:
    """A team within its ``guaranteed`` starts at once over the pool's limit and cuts a batch
    stream; it is sent upstream only once that stream's request has ended (closed, so the
    engine aborted it), not beside it: the engine of one slot never holds both (its count
    when the claim arrived is 0), and the claim arrived after the cut stream's end."""
    sim = SimConfig(decode_ms_per_step=5.0, output_len=400, max_num_seqs=1)
    async with running_sim(sim) as url:
        config = _one_pool(url, 1)
        async with reloadable_gateway(tmp_path, config) as gateway:
            gw = gateway.gw
            _, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            owner, _, key = await gw.team_and_key("oncall")
            config["scheduling"] = {
                "preempt_streams_for_claims": "lower_band",
                "teams": {owner: {"guaranteed": 1}},
            }
            await gateway.reload(config)
            for _ in range(3):  # a fresh stream to cut each time
                stream = asyncio.create_task(_stream(gw, batch))
                await asyncio.sleep(0.2)  # it holds the engine's one slot
                status, _, answer = await gw.chat(key, max_tokens=4)
                assert status == 200, answer
                events = await asyncio.wait_for(stream, 10)
                assert events[-2]["error"]["code"] == "preempted_in_flight"
            async with gw.session.get(f"{url}/sim/timings") as r:
                timings = await r.json()
    claims = [t for t in timings if t["generated"] == 4]  # the streams were cut long before
    cut = [t for t in timings if t not in claims]
    assert len(claims) == 3 and len(cut) == 3
    for claim, stream in zip(claims, cut, strict=True):
        assert claim["running_at_arrival"] + claim["waiting_at_arrival"] == 0, claim
        assert stream["ended"] <= claim["arrival"], (stream, claim)
