"""The release pipeline pages: the runs list and one run's timeline (steps with start, finish,
duration, resumed and adopted marks, a failure; the gate's rules; kept versions), refreshing
through htmx only while a run is under way; master only, like ``/admin/pipelines``; linked from
the registry. Runs are written through the pipeline's own store, as its steps write them."""

from __future__ import annotations

import html as htmllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.config.schema import GatewayConfig
from fleetgate.console import ConsoleFeature
from fleetgate.console.pipeline_chart import timeline_chart
from fleetgate.console.pipelines import PipelinePages, step_rows
from fleetgate.console.registry import Releases
from fleetgate.releases.pipeline_store import Pipeline
from tests.console.support import MASTER, Console, console_config, running_console
from tests.fakes import FakeUpstream

T0 = 1_760_000_000_000


def _config(upstream: str) -> GatewayConfig:
    base = console_config(upstream).model_dump(mode="json", exclude_unset=True)
    base["models"].append({"alias": "chat", "registry": {"model": "chat"}})
    base["releases"] = {"poll_interval_s": 0.2}
    # no model under pipelines.models: no replica drives the rows written below
    base["pipelines"] = {"tick_s": 0.2}
    return GatewayConfig.model_validate(base)


@pytest.fixture
async def gw(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path, config=_config(fake.url)) as c:
        yield c


def _pages(c: Console) -> PipelinePages:
    feature = next(f for f in c.gw.features.all if isinstance(f, ConsoleFeature))
    return next(p for p in feature._pages if isinstance(p, PipelinePages))


def _step(name: str, start_s: float, end_s: float | None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "status": "done" if end_s is not None else "running",
            "started_ms": T0 + int(start_s * 1000),
            "finished_ms": T0 + int(end_s * 1000) if end_s is not None else None,
            "detail": {}, "by": "gw-a", **extra}  # fmt: skip


GATE = {"verdict": "fail", "reason": "golden 0.91 < min 0.95",
        "rules": [{"rule": "golden >= 0.95", "metric": "golden", "verdict": "fail",
                   "reason": "golden 0.91 < min 0.95", "candidate": 0.91, "baseline": None},
                  {"rule": "drift_agreement >= 0.98", "metric": "drift_agreement",
                   "verdict": "pass", "reason": "within bounds", "candidate": 0.995,
                   "baseline": None}]}  # fmt: skip


async def _runs(c: Console) -> tuple[Releases, Pipeline, Pipeline]:
    releases = _pages(c).releases
    assert releases is not None
    await releases.admin.prepare()  # type: ignore[misc]
    store = releases.pipelines
    for n in (1, 2, 3):
        await c.admin("POST", "/admin/registry/models", json={"name": "chat"})
        status, _ = await c.admin("POST", "/admin/registry/models/chat/versions",
                                  json={"artifact_uri": f"sim://v{n}", "deployments": [
                                      {"model": "tiny", "api_base": "http://127.0.0.1:9/v1",
                                       "name": f"chat-v{n}"}]})  # fmt: skip
        assert status == 201, _
    # v1: stopped at the gate, after a restart in the middle of instance_up
    stopped = await store.create("chat", "v1", "chat")
    up = _step("instance_up", 0, 9.5, resumed=["gw-b"],
               detail={"urls": ["http://127.0.0.1:9001/v1"], "adopted": [4242]})  # fmt: skip
    steps = [up, _step("suites", 9.5, 20.0, by="gw-b", detail={"runs": {"ab": "r1"},
                       "memory": {"memory_rss_bytes": 64 * 2**20}}),
             _step("gate", 20.0, 20.1, by="gw-b", detail={"verdict": "fail",
                   "reason": GATE["reason"]}),
             _step("instance_down", 20.1, 22.0, by="gw-b")]  # fmt: skip
    moved = await store.change(
        stopped,
        steps=steps,
        gate=GATE,
        status="stopped",
        reason="stopped at the gate (fail): golden 0.91 < min 0.95",
    )
    assert moved is not None
    # v2: failed at production_up; v3: under way (suites running)
    failed = await store.create("chat", "v2", "chat")
    moved = await store.change(
        failed,
        status="failed",
        reason="production_up: <port busy>",
        steps=[
            _step(
                "production_up",
                0,
                3.0,
                status="failed",
                detail={"error": "production_up: <port busy>"},
            )
        ],
    )
    assert moved is not None
    running = await store.create("chat", "v3", "chat")
    current = await store.change(running, steps=[_step("instance_up", 0, 4.0),
                                                  _step("suites", 4.0, None)])  # fmt: skip
    assert current is not None
    return releases, moved, current


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with s.get(url, headers={"Accept": "text/html"}) as resp:
        return resp.status, await resp.text()


async def test_the_timeline_shows_each_step_the_gate_and_the_marks(gw: Console) -> None:
    await _runs(gw)
    s = await gw.signed_in(MASTER)
    async with s:
        status, page = await _get(s, gw.url + "/ui/pipelines/chat/v1")
        assert status == 200, page
        text = htmllib.unescape(page)
        for name in ("instance_up", "suites", "gate", "instance_down"):
            assert f'data-step="{name}" data-status="done"' in page
        assert "9.50 s" in text and "10.50 s" in text and "1.90 s" in text  # durations
        assert "resumed by gw-b after a restart" in text
        assert "engine already running adopted (pid 4242), not started again" in text
        assert "golden 0.91 < min 0.95" in text and "drift_agreement" in text
        assert "0.91" in text and "0.995" in text  # the candidate's figures of each rule
        assert "peak memory 64 MiB" in text
        assert 'id="pipeline-status">stopped<' in page
        assert "hx-trigger" not in page.split('id="timeline"')[1][:40]  # ended: no refresh
        assert "this run ends at the gate" in text
        assert "<svg" in page and "instance_down: done, 1.90 s" in text

        status, page = await _get(s, gw.url + "/ui/pipelines/chat/v2")
        text = htmllib.unescape(page)
        assert 'data-step="production_up" data-status="failed"' in page
        assert "failed: production_up: <port busy>" in text
        assert "&lt;port busy&gt;" in page  # escaped, never markup

        status, page = await _get(s, gw.url + "/ui/pipelines/chat/v3")
        assert 'hx-trigger="every 2s"' in page  # under way: refreshes itself
        assert 'data-step="suites" data-status="running"' in page and "so far" in page
        for name in ("gate", "instance_down", "production_up", "rollout", "keep"):
            assert f'data-step="{name}" data-status="upcoming"' in page

        status, page = await _get(s, gw.url + "/ui/pipelines")
        assert status == 200
        assert page.index("/ui/pipelines/chat/v3") < page.index("/ui/pipelines/chat/v1")
        assert 'hx-trigger="every 4s"' in page  # a run is under way
        status, page = await _get(s, gw.url + "/ui/pipelines?model=other")
        assert "No pipeline run of other" in page
        assert (await _get(s, gw.url + "/ui/pipelines/chat/v9"))[0] == 404
        assert (await _get(s, gw.url + "/ui/pipelines?page=x"))[0] == 400
        assert (await _get(s, gw.url + "/ui/pipelines?model=" + "m" * 65))[0] == 400

        # linked from the registry: the index, the model page, each version with a run
        _, page = await _get(s, gw.url + "/ui/registry")
        assert 'href="/ui/pipelines"' in page
        _, page = await _get(s, gw.url + "/ui/registry/chat")
        assert 'href="/ui/pipelines?model=chat"' in page
        assert 'href="/ui/pipelines/chat/v1"' in page and 'href="/ui/pipelines/chat/v3"' in page


async def test_pipeline_pages_are_the_masters_only(gw: Console) -> None:
    await _runs(gw)
    status, team = await gw.admin("POST", "/admin/teams", json={"name": "search"})
    assert status == 201
    for role in ("team_admin", "finance_viewer", "user"):
        status, key = await gw.admin("POST", "/admin/keys", json={"team": team["id"],
                                                                   "role": role})  # fmt: skip
        assert status == 201
        s = await gw.signed_in(key["key"])
        async with s:
            for path in ("/ui/pipelines", "/ui/pipelines/chat/v1"):
                status, page = await _get(s, gw.url + path)
                assert status == 403 and "/ui/pipelines/chat/v1" not in page, (role, path)
    s = await gw.signed_in(MASTER)
    async with s:
        _, page = await _get(s, gw.url + "/ui/overview")
        assert 'href="/ui/pipelines"' in page  # in the master's navigation


async def test_without_the_releases_feature_the_page_says_so(gw: Console) -> None:
    _pages(gw).releases = None
    s = await gw.signed_in(MASTER)
    async with s:
        status, page = await _get(s, gw.url + "/ui/pipelines")
        assert status == 200 and "releases feature is off" in page
        assert (await _get(s, gw.url + "/ui/pipelines/chat/v1"))[0] == 404


def test_a_running_step_lasts_until_now_and_the_chart_scales_to_the_run() -> None:
    run = Pipeline("chat", "v1", "chat", "running",
                   [_step("instance_up", 0, 4.0), _step("suites", 4.0, None)], {}, None, None,
                   None, 0, 1, T0, T0)  # fmt: skip
    rows = step_rows(run, T0 + 10_000)
    assert [r["seconds"] for r in rows] == [4.0, 6.0]
    svg = timeline_chart(rows, ["gate"])
    assert "10.0 s" in svg  # the axis spans the run so far
    assert 'width="208.0"' in svg and 'x="338.0"' in svg  # 4 of 10 s, then from 4 s
    assert "gate</text>" in svg and "not begun" in svg
