"""The console end to end in headless Chromium: sign in with keys, create a team and a key (seen
once), chat in the playground and watch it stream, find the request in spend and the audit log,
revoke the key, keep a team admin inside its team; axe-core and the keyboard on every page.
Screenshots of each page go to docs/console/ (docs/console.md shows them)."""

from __future__ import annotations

import asyncio
import csv
import io
from typing import Any

import pytest

from tests.console.browser import (
    accessibility_violations,
    browser_page,
    chromium_path,
    new_page,
    screenshot,
    tab_order,
)
from tests.console.support import MASTER, Console
from tests.fakes import FakeUpstream, Reply

pytestmark = pytest.mark.slow

ANSWER = "Streaming works one word at a time from the fake engine"


async def sign_in(page: Any, url: str, key: str) -> None:
    await page.goto(url + "/ui")
    assert "/ui/login" in page.url
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in with a key").click()
    await page.wait_for_load_state()


async def sign_out(page: Any) -> None:
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url("**/ui/login")


async def checked(page: Any, name: str) -> None:
    """Screenshot the page, then hold it to the accessibility rules."""
    await screenshot(page, name)
    assert await accessibility_violations(page) == [], name


async def eventually(fn: Any, timeout_s: float = 5.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await fn()
        if value or asyncio.get_running_loop().time() > deadline:
            return value
        await asyncio.sleep(0.1)


async def test_the_console_end_to_end(console: Console, fake: FakeUpstream) -> None:
    chromium_path()
    url = console.url
    async with browser_page() as browser:
        page = await new_page(browser)
        await page.goto(url + "/ui")
        await checked(page, "login")

        # The keyboard: the skip link first, then the form in order.
        order = await tab_order(page, 4)
        assert order[0] == "A:#main"
        assert order[1:3] == ["INPUT:key", "BUTTON:Sign in with a key"]

        await sign_in(page, url, MASTER)
        assert page.url.endswith("/ui/overview")
        assert await accessibility_violations(page) == []
        order = await tab_order(page, 3)
        assert order == ["A:#main", "A:/ui/overview", "A:/ui/teams"]

        # Create two teams, then a key in one: shown once.
        await page.get_by_role("link", name="Teams & keys").click()
        for name in ("ads", "search"):
            await page.get_by_label("Team name").fill(name)
            await page.get_by_label("Requests per minute").first.fill("600")
            await page.get_by_role("button", name="Create team").click()
            await page.wait_for_url("**/ui/teams/team_*")
            if name == "ads":
                ads_id = page.url.rsplit("/", 1)[1]
                await page.goto(url + "/ui/teams")
        search_id = page.url.rsplit("/", 1)[1]
        await page.get_by_label("Budget (USD) of the new key").fill("25")
        await page.get_by_role("button", name="Create key").click()
        key = (await page.locator("#new-key").inner_text()).strip()
        assert key.startswith("sk-fg-")
        await checked(page, "team-new-key")
        await page.goto(url + f"/ui/teams/{search_id}")
        assert key not in await page.content()  # never shown again
        await page.get_by_label("Role", exact=True).select_option("team_admin")
        await page.get_by_role("button", name="Create key").click()
        admin_key = (await page.locator("#new-key").inner_text()).strip()
        await page.goto(url + "/ui/teams")
        await checked(page, "teams")
        await sign_out(page)

        # The new key in the playground: the reply arrives in pieces.
        fake.queue(Reply(content=ANSWER, chunk_delay=0.15))
        await sign_in(page, url, key)
        assert page.url.endswith("/ui/playground")
        await page.get_by_label("Alias").select_option("tiny")  # the one with a price
        await page.get_by_label("Message").fill("Say something")
        await page.get_by_role("button", name="Send").click()
        reply = page.locator("#reply")
        partial = await eventually(lambda: _partial(reply), timeout_s=5.0)  # some words, not all
        assert partial, "the reply never showed a partial state"
        await page.wait_for_function(
            "document.getElementById('chat-status').textContent.startsWith('Done')"
        )
        assert (await reply.inner_text()).strip() == ANSWER
        assert int(await reply.get_attribute("data-chunks")) >= len(ANSWER.split())
        await checked(page, "playground")
        await sign_out(page)

        # The request in spend and in the audit log, as the master key sees them.
        await sign_in(page, url, MASTER)
        key_id = await _key_id(console, search_id, key)

        async def in_spend() -> bool:  # by name, the id on hover
            await page.goto(url + "/ui/spend?group=key")
            return await page.locator(f"table span[title='{key_id}']").count() == 1

        assert await eventually(in_spend), "the playground's request is not in spend"
        await page.get_by_label("Group by").select_option("team")
        await page.get_by_role("button", name="Show").click()
        await page.wait_for_selector("table >> text=search")
        await checked(page, "spend")
        async with page.expect_download() as download:
            await page.get_by_role("link", name="Download CSV").click()
        csv_text = (await (await download.value).path()).read_text()
        assert csv_text.splitlines()[0].startswith("team,team_name,spend_usd")
        row = next(r for r in csv.DictReader(io.StringIO(csv_text)) if r["team_name"] == "search")
        assert row["requests"] == "1" and float(row["spend_usd"]) > 0, row

        await page.goto(url + "/ui/overview")  # the playground's request, seen here too
        traffic = await page.locator("table").first.inner_text()
        assert "tiny\t1\t" in traffic, traffic
        assert await page.locator("#active-keys").inner_text() == "2"
        await checked(page, "overview")

        await page.goto(url + "/ui/audit?kind=request")
        assert await page.locator(f"#audit-rows span[title='{key_id}']").count() >= 1
        await page.get_by_label("Search").fill("key.create")
        await page.get_by_label("Log", exact=True).select_option("admin")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_selector("#audit-rows >> text=key.create")
        await checked(page, "audit")
        await page.goto(url + "/ui/models")
        await page.get_by_label("Split of tiny (version=percent, ...)").fill("v1=90, v2=10")
        await page.get_by_role("button", name="Set split of tiny").click()
        await page.wait_for_selector("text=v1 90.0%")
        await checked(page, "models")

        # The registry: a version promoted to staging from the model's page; the queues.
        await _registered(console, fake.url)
        await page.goto(url + "/ui/registry")
        await page.get_by_role("link", name="chat", exact=True).click()
        await page.wait_for_url("**/ui/registry/chat")
        await page.get_by_label("Stage for v2").select_option("staging")
        await page.get_by_role("button", name="Promote v2").click()
        await page.wait_for_selector("text=staging: v2")
        await checked(page, "registry")
        await page.goto(url + "/ui/queues")
        assert "tiny" in await page.locator("#queues").inner_text()
        await checked(page, "queues")
        await page.goto(url + "/ui/routing")
        await checked(page, "routing")
        await page.goto(url + "/ui/guardrails")
        assert "Safety is not configured" in await page.locator("main").inner_text()
        await checked(page, "guardrails")

        # Revoke the key: the next call with it is refused.
        await page.goto(url + f"/ui/teams/{search_id}")
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()  # confirmed
        await page.wait_for_url(f"**/ui/teams/{search_id}")
        assert await eventually(lambda: _refused(console, key)), "the revoked key still works"
        await sign_out(page)

        # A team admin stays inside its team, on the pages and in the JSON behind them.
        await sign_in(page, url, admin_key)
        await page.goto(url + "/ui/teams")
        assert "ads" not in await page.locator("main").inner_text()
        for path in (f"/ui/teams/{ads_id}", "/ui/guardrails"):
            response = await page.goto(url + path)
            assert response.status in (403, 404), path
        response = await page.goto(url + f"/ui/spend?team={ads_id}")
        assert response.status == 403
        for path in (f"/admin/teams/{ads_id}", f"/admin/keys?team={ads_id}",
                     f"/admin/spend?team={ads_id}"):  # fmt: skip
            status, _ = await console.admin("GET", path, admin_key)
            assert status in (403, 404), path


async def _registered(console: Console, upstream: str) -> None:
    """The model ``chat`` with two versions, v1 in production, each with an eval run."""
    assert (await console.admin("POST", "/admin/registry/models", json={"name": "chat"}))[0] == 201
    for n, score in ((1, 0.91), (2, 0.93)):
        body = {
            "artifact_uri": f"s3://models/chat/{n}",
            "deployments": [{"model": "tiny", "api_base": upstream, "name": f"chat-v{n}"}],
        }
        status, _ = await console.admin("POST", "/admin/registry/models/chat/versions", json=body)
        assert status == 201
        run = {"suite": "golden.jsonl", "suite_digest": "ab" * 16, "metrics": {"golden": score}}
        path = f"/admin/registry/models/chat/versions/v{n}/evals"
        assert (await console.admin("POST", path, json=run))[0] == 201
    status, _ = await console.admin(
        "POST", "/admin/registry/models/chat/promote", json={"stage": "production", "version": "v1"}
    )
    assert status == 200


async def _partial(reply: Any) -> bool:
    text = (await reply.inner_text()).strip()
    return bool(text) and text != ANSWER


async def _key_id(console: Console, team_id: str, key: str) -> str:
    status, keys = await console.admin("GET", f"/admin/keys?team={team_id}")
    assert status == 200
    hint_head, hint_tail = key[:10], key[-4:]
    return next(k["id"] for k in keys["data"] if k["hint"] == f"{hint_head}...{hint_tail}")


async def _refused(console: Console, key: str) -> bool:
    return await console.chat(key) == 401
