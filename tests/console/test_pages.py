"""The registry and queue pages: what they show, their controls (CSRF, gates, compare-and-set),
who may see them, and the page saying so when the feature behind it is off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.config.schema import GatewayConfig
from fleetgate.console import ConsoleFeature
from fleetgate.console.queues import AdmissionRates, _quota_state
from fleetgate.console.registry import RegistryPages
from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.quota import QuotaTree
from tests.console.support import MASTER, Console, console_config, csrf_of, running_console
from tests.fakes import FakeUpstream

GATES = {"chat": {"rules": [{"metric": "golden", "min": 0.9}]}}
SUITE = {"suite": "golden.jsonl", "suite_digest": "ab" * 16}


def _config(upstream: str, **extra: Any) -> GatewayConfig:
    """The console's config, plus ``chat`` following the registry's production stage."""
    base = console_config(upstream).model_dump(mode="json", exclude_unset=True)
    base["models"].append({"alias": "chat", "registry": {"model": "chat"}})
    base["releases"] = {"poll_interval_s": 0.2, "gates": GATES}
    return GatewayConfig.model_validate({**base, **extra})


@pytest.fixture
async def gw(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path, config=_config(fake.url)) as c:
        yield c


async def _team_key(c: Console, team: str, role: str = "user") -> tuple[str, str]:
    status, t = await c.admin("POST", "/admin/teams", json={"name": team})
    assert status == 201, t
    status, k = await c.admin("POST", "/admin/keys", json={"team": t["id"], "role": role})
    assert status == 201, k
    return t["id"], k["key"]


def _version(upstream: str, n: int) -> dict[str, Any]:
    return {
        "artifact_uri": f"s3://models/chat/{n}",
        "deployments": [{"model": "tiny", "api_base": upstream, "name": f"chat-v{n}"}],
    }


async def _registered(c: Console, upstream: str, versions: int) -> None:
    assert (await c.admin("POST", "/admin/registry/models", json={"name": "chat"}))[0] == 201
    for n in range(1, versions + 1):
        status, body = await c.admin(
            "POST", "/admin/registry/models/chat/versions", json=_version(upstream, n)
        )
        assert status == 201, body


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with s.get(url) as resp:
        return resp.status, await resp.text()


async def _post(s: aiohttp.ClientSession, url: str, data: dict[str, str]) -> tuple[int, str]:
    async with s.post(url, data=data, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def test_the_registry_page_promotes_through_the_gate_and_rolls_back(
    gw: Console, fake: FakeUpstream
) -> None:
    await _registered(gw, fake.url, 2)
    runs = "/admin/registry/models/chat/versions/{}/evals"
    for version, score in (("v1", 0.95), ("v2", 0.5)):
        body = {**SUITE, "metrics": {"golden": score}}
        assert (await gw.admin("POST", runs.format(version), json=body))[0] == 201
    url = gw.url + "/ui/registry"
    s = await gw.signed_in(MASTER)
    async with s:
        status, html = await _get(s, url)
        assert status == 200 and 'href="/ui/registry/chat"' in html
        assert 'href="/ui/registry"' in html  # in the navigation
        status, html = await _get(s, url + "/chat")
        assert status == 200
        token = csrf_of(html)
        assert "golden 0.95 within bounds" in html and "golden 0.5 &lt; min 0.9" in html
        assert "Followed by: <code>chat</code>" in html
        promote = url + "/chat/promote"
        # no CSRF token: refused, nothing moves
        assert (await _post(s, promote, {"stage": "production", "version": "v1"}))[0] == 403
        status, html = await _post(
            s, promote, {"csrf": token, "stage": "production", "version": "v1"}
        )
        assert status == 302
        # v2's gate fails: refused with the reason, on the page
        status, html = await _post(
            s, promote, {"csrf": token, "stage": "production", "version": "v2"}
        )
        assert status == 409 and "gate of &#39;chat&#39; is fail" in html
        stages = (await gw.admin("GET", "/admin/registry/models/chat"))[1]["stages"]
        assert stages["production"] == "v1"
        # forced past the gate: moves, audited as forced
        status, _ = await _post(
            s, promote, {"csrf": token, "stage": "production", "version": "v2", "force": "on"}
        )
        assert status == 302
        status, html = await _get(s, url + "/chat")
        assert "Roll production of chat back to v1" in html and "(forced)" in html
        # the form is drawn with production's version: sent twice (a double click), the
        # second does not roll the first back: production no longer holds v2, a 409 says so
        back = {"csrf": token, "expected": "v2"}
        status, html = await _post(s, url + "/chat/rollback", back)  # asks first
        assert status == 200 and "Roll production of chat back?" in html
        assert (await gw.admin("GET", "/admin/registry/models/chat"))[1]["stages"][
            "production"
        ] == "v2"
        back["confirmed"] = "yes"
        status, _ = await _post(s, url + "/chat/rollback", back)
        assert status == 302
        status, html = await _post(s, url + "/chat/rollback", back)
        assert status == 409 and "holds &#39;v1&#39;, not &#39;v2&#39;" in html, html
        stages = (await gw.admin("GET", "/admin/registry/models/chat"))[1]["stages"]
        assert stages["production"] == "v1" and stages["previous"] == "v2"
        # drawn when production was empty: 409 on the page, nothing moves
        status, html = await _post(
            s, url + "/chat/rollback", {"csrf": token, "expected": "", "confirmed": "yes"}
        )
        assert status == 409 and "not None as expected" in html
        # bad form values are 400s on the page, not 500s
        status, _ = await _post(s, promote, {"csrf": token, "stage": "bad stage!", "version": "v1"})
        assert status == 400
        assert (await _get(s, url + "/nope"))[0] == 404
        assert (await _get(s, url + "?page=0"))[0] == 400
    status, audit = await gw.admin("GET", "/admin/audit")
    actions = [r["action"] for r in audit["data"]]
    assert {"registry.promote", "registry.promote.forced", "registry.rollback"} <= set(actions)


async def test_the_registry_page_shows_quality_by_version(gw: Console, fake: FakeUpstream) -> None:
    await _registered(gw, fake.url, 1)
    status, _ = await gw.admin(
        "POST",
        "/admin/registry/models/chat/promote",
        json={"stage": "production", "version": "v1", "force": True},
    )
    assert status == 200
    headers = {"Authorization": f"Bearer {MASTER}"}
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    async with gw.http.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200
        request_id = resp.headers["x-request-id"]
    for _ in range(100):  # feedback is taken once the answer's record is in the store
        status, _ = await gw.admin(
            "POST", "/v1/feedback", json={"request_id": request_id, "rating": "down"}
        )
        if status != 404:
            break
        await asyncio.sleep(0.05)
    assert status == 201
    s = await gw.signed_in(MASTER)
    async with s:
        for _ in range(40):  # the spend and request rows are written in the background
            status, html = await _get(s, gw.url + "/ui/registry/chat")
            if "100.0%" in html:
                break
            await asyncio.sleep(0.05)
        assert status == 200
        row = html.split("Quality by version", 1)[1].split("</tr>", 2)[1]
        assert "<code>v1</code>" in row and "100.0%" in row, row


async def test_registry_pages_are_the_masters_only(gw: Console, fake: FakeUpstream) -> None:
    await _registered(gw, fake.url, 1)
    team, admin_key = await _team_key(gw, "search", role="team_admin")
    status, finance = await gw.admin(
        "POST", "/admin/keys", json={"team": team, "role": "finance_viewer"}
    )
    assert status == 201
    for key in (admin_key, finance["key"]):
        s = await gw.signed_in(key)
        async with s:
            status, html = await _get(s, gw.url + "/ui/spend")
            assert status == 200 and "/ui/registry" not in html  # not in the navigation
            for path in ("/ui/registry", "/ui/registry/chat"):
                assert (await _get(s, gw.url + path))[0] == 403, path
            token = csrf_of(html)
            status, _ = await _post(
                s, gw.url + "/ui/registry/chat/promote",
                {"csrf": token, "stage": "production", "version": "v1"},
            )  # fmt: skip
            assert status == 403
    stages = (await gw.admin("GET", "/admin/registry/models/chat"))[1]["stages"]
    assert stages.get("production") is None


async def test_the_registry_page_says_when_releases_are_off(console: Console) -> None:
    feature = next(f for f in console.gw.features.all if isinstance(f, ConsoleFeature))
    pages = next(p for p in feature._pages if isinstance(p, RegistryPages))
    pages.releases = None  # a console built without the releases feature
    s = await console.signed_in(MASTER)
    async with s:
        status, html = await _get(s, console.url + "/ui/registry")
        assert status == 200 and "registry (the releases feature) is off" in html


async def test_the_queue_page_shows_pools_and_a_team_admin_only_its_team(
    console: Console,
) -> None:
    search, admin_key = await _team_key(console, "search", role="team_admin")
    ads, user_key = await _team_key(console, "ads")
    assert await console.chat(admin_key) == 200
    assert await console.chat(user_key) == 200
    s = await console.signed_in(MASTER)
    async with s:
        status, html = await _get(s, console.url + "/ui/queues")
        assert status == 200 and 'href="/ui/queues"' in html
        assert 'hx-trigger="every 5s"' in html  # refreshes itself
        assert '<h2 id="pool-1">tiny</h2>' in html
        # teams by name, the id on hover
        assert f'title="{search}">search</span>' in html and f'title="{ads}">ads</span>' in html
        # nothing queued: no "would wait" figure, the mean service time said as what it is
        assert "would wait" in html and "no wait: admitted at once" in html
        assert "Nothing is queued in tiny" in html and "mean service time, not a wait" in html
        assert (await _get(s, console.url + "/ui/queues?page=x"))[0] == 400
    a = await console.signed_in(admin_key)
    async with a:
        status, html = await _get(a, console.url + "/ui/queues")
        assert status == 200
        assert f'title="{search}">search</span>' in html and ads not in html
    # the JSON behind it answers the team admin the same
    status, body = await console.admin("GET", "/admin/queues", admin_key)
    assert status == 200 and set(body["data"][0]["teams"]) == {search}
    u = await console.signed_in(user_key)
    async with u:
        assert (await _get(u, console.url + "/ui/queues"))[0] == 403


async def test_the_queue_page_pages_its_pools(console: Console) -> None:
    for alias in ("tiny", "other"):
        assert await console.chat(MASTER, alias) in (200, 400, 402)
    feature = next(f for f in console.gw.features.all if isinstance(f, ConsoleFeature))
    feature.console.config = feature.console.config.model_copy(update={"page_size": 1})
    s = await console.signed_in(MASTER)
    async with s:
        _, first = await _get(s, console.url + "/ui/queues")
        _, second = await _get(s, console.url + "/ui/queues?page=2")
    assert ">other</h2>" in first and ">tiny</h2>" not in first and "page=2" in first
    assert ">tiny</h2>" in second and ">other</h2>" not in second


async def test_the_queue_page_says_when_scheduling_is_off(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    config = console_config(fake.url).model_copy(
        update={"scheduling": SchedulingConfig(enabled=False)}
    )
    async with running_console(fake.url, tmp_path, config=config) as c:
        s = await c.signed_in(MASTER)
        async with s:
            status, html = await _get(s, c.url + "/ui/queues")
    assert status == 200 and "Scheduling is off" in html


def test_admissions_per_second_come_from_the_pools_counter() -> None:
    now = [0.0]
    rates = AdmissionRates(clock=lambda: now[0])
    assert rates.read("p", 10) is None  # the first reading: no rate yet
    now[0] = 0.5
    assert rates.read("p", 12) is None  # too soon: still none
    now[0] = 2.0
    assert rates.read("p", 30) == 10.0  # 20 admissions in 2 s
    now[0] = 2.5
    assert rates.read("p", 31) == 10.0  # the last rate until a full second has passed
    assert rates.read("p", 3) is None  # the pool was made again: counting restarts
    rates.forget(set())
    assert rates.read("p", 5) is None


def test_the_quota_column_says_within_borrowing_or_capped() -> None:
    config = SchedulingConfig.model_validate({"teams": {
        "a": {"quota": {"concurrency": {"nominal": 1, "borrowing_limit": 1}}},
    }})  # fmt: skip
    pool = Pool("p", 4, 0.0)
    assert _quota_state(pool, "a") == "-"  # no quotas: fair share only
    pool.quotas = QuotaTree(config, time.monotonic)
    assert _quota_state(pool, "a") == "within quota"
    pool.take("a")
    pool.take("a")
    assert _quota_state(pool, "a") == "capped"  # a third would pass nominal + borrowing
    pool.give_back("a")
    assert _quota_state(pool, "a") == "within quota"  # 1 of 1 nominal: not over it
    assert _quota_state(pool, "b") == "borrowing"  # no quota of its own: all borrowed
