"""The console's forms and pages as a person meets them, in headless Chromium (#35): POST-
redirect-GET (a reload never creates a second key; the new key shows once, never in the URL),
refused forms keep their values and name the field by its label, destructive actions ask
first (without JavaScript too), the budget-period select is not cut off, names with ids on
hover ("master key" for the master key's traffic), keys' last use and a copy button, spend
over time with readable labels, queue waits only when something is queued, the canary
placeholder from real versions, and a multi-turn playground with parameters. Screenshots of
the spend-over-time chart and the queue page go to docs/console/."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleetgate.config.schema import GatewayConfig
from tests.console.browser import SHOTS, browser_page, chromium_path, new_page, screenshot
from tests.console.support import MASTER, Console, console_config, csrf_of, running_console
from tests.console.test_browser import eventually, sign_in
from tests.fakes import FakeUpstream, Reply

pytestmark = pytest.mark.slow

# the rendered width a select needs for its longest option: text, padding and the arrow
SELECT_FITS = """(sel) => {
  const style = getComputedStyle(sel);
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = style.font;
  const text = Math.max(...Array.from(sel.options, o => ctx.measureText(o.text).width));
  const box = sel.getBoundingClientRect(), cell = sel.parentElement.getBoundingClientRect();
  const pad = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
  return {need: text + pad + 20, width: box.width, right: box.right, cellRight: cell.right};
}"""

# the smallest rendered font size (CSS px, after any scaling of the SVG) of a chart's labels
SMALLEST_LABEL = """(svg) => Math.min(...Array.from(svg.querySelectorAll("text"),
  t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a))"""


def _config(upstream: str) -> GatewayConfig:
    """The console tests' config plus an alias ``slow`` of one engine slot (to queue on)."""
    raw = console_config(upstream).model_dump(mode="json", exclude_unset=True)
    deployment = {"provider": "openai", "model": "tiny", "api_base": upstream,
                  "max_num_seqs": 1, "version": "2024-06"}  # fmt: skip
    raw["models"].append({"alias": "slow", "deployments": [deployment]})
    return GatewayConfig.model_validate(raw)


@pytest.fixture
async def gw(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path, config=_config(fake.url)) as c:
        yield c


async def _context_page(browser: Any, url: str) -> Any:
    page = await new_page(browser)
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    return page


async def test_forms_redirect_keep_values_ask_first_and_fit(gw: Console) -> None:
    chromium_path()
    url = gw.url
    async with browser_page() as browser:
        page = await _context_page(browser, url)
        await sign_in(page, url, MASTER)
        await page.goto(url + "/ui/teams")

        # The budget-period select shows its longest option whole, inside its cell.
        fit = await page.locator("#team-period").evaluate(SELECT_FITS)
        assert fit["width"] >= fit["need"] and fit["right"] <= fit["cellRight"] + 0.5, fit

        # Refused: every value kept, the field named by its label.
        await page.get_by_label("Team name").fill("search")
        await page.get_by_label("Requests per minute").fill("-5")
        await page.get_by_label("Budget (USD)").fill("12.5")
        await page.get_by_label("Budget period").select_option("weekly")
        await page.get_by_label("Tags (key=value, ...)").fill("env=prod")
        await page.get_by_role("button", name="Create team").click()
        await page.wait_for_load_state()
        error = await page.locator("#form-error").inner_text()
        assert error == "Requests per minute must be a whole number of 0 or more", error
        assert "'rpm'" not in await page.content()
        assert await page.get_by_label("Team name").input_value() == "search"
        assert await page.get_by_label("Requests per minute").input_value() == "-5"
        assert await page.get_by_label("Budget (USD)").input_value() == "12.5"
        assert await page.get_by_label("Budget period").input_value() == "weekly"
        assert await page.get_by_label("Tags (key=value, ...)").input_value() == "env=prod"
        await page.get_by_label("Requests per minute").fill("600")
        await page.get_by_role("button", name="Create team").click()
        await page.wait_for_url("**/ui/teams/team_*")
        team_id = page.url.rsplit("/", 1)[1]
        assert await page.locator("#flash").inner_text() == "Team search created."

        # A key: the POST redirects, the key shows once (not in the URL); a reload neither
        # shows it again nor creates a second key.
        fit = await page.locator("#key-period").evaluate(SELECT_FITS)
        assert fit["width"] >= fit["need"] and fit["right"] <= fit["cellRight"] + 0.5, fit
        await page.get_by_label("Budget (USD) of the new key").fill("25")
        await page.get_by_role("button", name="Create key").click()
        await page.wait_for_url(f"**/ui/teams/{team_id}")
        key = (await page.locator("#new-key").inner_text()).strip()
        assert key.startswith("sk-fg-") and key not in page.url
        await page.reload()
        assert await page.locator("#new-key").count() == 0
        assert key not in await page.content()
        status, keys = await gw.admin("GET", f"/admin/keys?team={team_id}")
        assert status == 200 and len(keys["data"]) == 1
        key_id = keys["data"][0]["id"]

        # Last used: never, then the time of its request (written in the background).
        row = page.locator("tr", has=page.get_by_role("button", name=f"Revoke key {key_id}"))
        assert await row.locator("td.last-used").inner_text() == "never"
        assert await gw.chat(key) == 200
        await gw.feature.console.tenancy.key_use.flush()
        await page.reload()
        assert (await row.locator("td.last-used").inner_text()).startswith("20")

        # The copy button puts the key id on the clipboard.
        await page.get_by_role("button", name=f"Copy key id {key_id}").click()
        assert await page.evaluate("navigator.clipboard.readText()") == key_id

        # A refused key limit keeps its values in its own form, named by label.
        await page.get_by_text(f"Limits of {key_id}", exact=True).click()
        await page.get_by_label(f"Tokens per minute of {key_id}").fill("lots")
        await page.get_by_role("button", name=f"Save limits of {key_id}").click()
        await page.wait_for_load_state()
        assert (
            await page.locator("#form-error").inner_text()
            == "Tokens per minute must be a whole number of 0 or more"
        )
        assert await page.get_by_label(f"Tokens per minute of {key_id}").input_value() == "lots"

        # Revoke asks first; Cancel keeps the key; confirming revokes it.
        await page.goto(url + f"/ui/teams/{team_id}")
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()
        await page.wait_for_selector(f"h1:text('Revoke key {key_id}?')")
        await page.get_by_role("link", name="Cancel").click()
        await page.wait_for_url(f"**/ui/teams/{team_id}")
        assert await gw.chat(key) == 200
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()  # the confirm
        await page.wait_for_url(f"**/ui/teams/{team_id}")
        assert "revoked" in await page.locator("#flash").inner_text()

        async def refused() -> bool:
            return await gw.chat(key) == 401

        assert await eventually(refused), "the revoked key still works"

        # Without JavaScript the confirmation works the same (a page, not a dialog).
        nojs = await browser.new_context(java_script_enabled=False)
        bare = await nojs.new_page()
        await sign_in(bare, url, MASTER)
        await bare.goto(url + "/ui/models")
        await bare.get_by_label("Split of tiny (version=percent, ...)").fill("v1=50, v2=50")
        await bare.get_by_role("button", name="Set split of tiny").click()
        await bare.get_by_role("button", name="Clear split of tiny").click()
        await bare.wait_for_selector("h1:text('Clear the canary split of tiny?')")
        assert gw.feature.console.canary.get("tiny") is not None  # not yet
        await bare.get_by_role("button", name="Clear split of tiny").click()
        await bare.wait_for_url("**/ui/models")
        assert gw.feature.console.canary.get("tiny") is None
        await nojs.close()


async def test_names_spend_over_time_queues_and_playground(gw: Console, fake: FakeUpstream) -> None:
    chromium_path()
    url = gw.url
    status, team = await gw.admin("POST", "/admin/teams", json={"name": "search"})
    assert status == 201
    status, made = await gw.admin("POST", "/admin/keys", json={"team": team["id"]})
    assert status == 201
    for key in (made["key"], made["key"], MASTER):
        assert await gw.chat(key) == 200
    async with browser_page() as browser:
        page = await _context_page(browser, url)
        await sign_in(page, url, MASTER)

        # Spend by team: names, the id on hover, the master key's traffic named.
        today = datetime.now(UTC).date().isoformat()

        async def spent() -> bool:
            await page.goto(url + f"/ui/spend?group=team&over=team&step=hour&since={today}")
            return "master key" in await page.locator("table").inner_text()

        assert await eventually(spent), "the spend rows never arrived"
        cells = page.locator("table tbody td:first-child")
        assert await cells.locator(f"span[title='{team['id']}']").inner_text() == "search"
        assert "(none)" not in await page.locator("table").inner_text()
        chart = page.locator("#chart-over-time")
        assert await chart.locator("polyline").count() == 2  # search and master key
        legend = await chart.locator("text.legend").all_text_contents()
        assert any(t.startswith("search ") for t in legend), legend
        assert any(t.startswith("master key ") for t in legend), legend
        for svg in await page.locator("svg").all():  # both charts: labels at least 11 px
            assert await svg.evaluate(SMALLEST_LABEL) >= 11
        await page.set_viewport_size({"width": 700, "height": 860})  # a narrow window
        for svg in await page.locator("svg").all():
            assert await svg.evaluate(SMALLEST_LABEL) >= 11
        await page.set_viewport_size({"width": 1280, "height": 860})
        await page.locator("figure", has=chart).screenshot(path=str(SHOTS / "spend-over-time.png"))
        await page.get_by_label("Over time by").select_option("alias")
        await page.get_by_label("Per", exact=True).select_option("day")
        await page.get_by_role("button", name="Show").click()
        await page.wait_for_selector("#chart-over-time text.legend >> text=tiny")

        # Models: the canary placeholder is built from the alias's real versions.
        await page.goto(url + "/ui/models")
        slow = page.get_by_label("Split of slow (version=percent, ...)")
        assert await slow.get_attribute("placeholder") == "2024-06=100"
        tiny = page.get_by_label("Split of tiny (version=percent, ...)")
        assert await tiny.get_attribute("placeholder") == "v1=90, v2=10"
        await slow.fill(await slow.get_attribute("placeholder"))
        await page.get_by_role("button", name="Set split of slow").click()
        await page.wait_for_selector("text=2024-06 100.0%")

        # Queues: nothing queued says so; with requests queued, a wait per band.
        fake.delay_s = 0.5
        assert await gw.chat(MASTER, "slow") == 200  # a service time to estimate from
        await page.goto(url + "/ui/queues")
        text = await page.locator("#queues").inner_text()
        assert "Nothing is queued in slow" in text and "would wait" in text
        fake.delay_s = 3.0
        calls = [asyncio.create_task(gw.chat(MASTER, "slow")) for _ in range(3)]
        pool = gw.feature.console.scheduler.pools["slow"]
        assert await eventually(lambda: _async(pool.queue.size >= 2)), "nothing queued"
        await page.goto(url + "/ui/queues")
        section = page.locator("section", has=page.locator("h2", has_text="slow"))
        bands = await section.locator("table").nth(1).inner_text()
        row = next(r for r in bands.splitlines() if r.startswith("interactive"))
        queued, wait = row.split("\t")[1:3]
        # two queued ahead and one running, each about 0.5 s on the one slot
        assert queued == "2" and 1.0 <= float(wait.removesuffix(" s")) <= 3.0, row
        assert "Nothing is queued in slow" not in await section.inner_text()
        await screenshot(page, "queues-waiting")
        fake.delay_s = 0.0
        await asyncio.gather(*calls)

        # Playground: two turns with a system prompt, temperature and max tokens.
        fake.queue(Reply(content="Paris"), Reply(content="About two million"))
        await page.goto(url + "/ui/playground")
        await page.get_by_label("Alias").select_option("tiny")
        await page.get_by_label("System prompt").fill("Answer briefly.")
        await page.get_by_label("Temperature").fill("0.3")
        await page.get_by_label("Max tokens").fill("64")
        for message in ("Capital of France?", "How many live there?"):
            await page.get_by_label("Message").fill(message)
            await page.get_by_role("button", name="Send").click()
            await page.wait_for_function(
                "document.getElementById('chat-status').textContent.startsWith('Done')"
            )
        assert (await page.locator("#reply").inner_text()).strip() == "About two million"
        turns = await page.locator("#conversation li").all_inner_texts()
        assert turns == ["You: Capital of France?", "Assistant: Paris", "You: How many live there?"]
        second = fake.seen[-1].body
        assert second["messages"] == [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris"},
            {"role": "user", "content": "How many live there?"},
        ]
        assert second["temperature"] == 0.3 and second["max_tokens"] == 64
        sent = len(fake.seen)
        await page.get_by_label("Temperature").fill("7")  # the field's range stops it here
        await page.get_by_label("Message").fill("Again")
        await page.get_by_role("button", name="Send").click()
        assert not await page.get_by_label("Temperature").evaluate("e => e.validity.valid")
        assert len(fake.seen) == sent and await page.locator("#conversation li").count() == 3
        await page.get_by_role("button", name="New conversation").click()
        assert await page.locator("#conversation li").count() == 0


async def test_the_playground_refuses_bad_parameters_and_turns(gw: Console) -> None:
    s = await gw.signed_in(MASTER)
    async with s:
        async with s.get(gw.url + "/ui/playground") as resp:
            token = csrf_of(await resp.text())
        turn = [{"role": "user", "content": "hi"}]
        for body, words in (
            ({"temperature": 7}, "Temperature must be a number from 0 to 2"),
            ({"temperature": "hot"}, "Temperature must be a number from 0 to 2"),
            ({"max_tokens": 0}, "Max tokens must be a whole number of 1 or more"),
            ({"max_tokens": 2.5}, "Max tokens must be a whole number of 1 or more"),
            ({"messages": [{"role": "tool", "content": "x"}]}, "Each message is"),
            ({"messages": [{"role": "user", "content": 5}]}, "Each message is"),
            ({"messages": turn * 201}, "at most 200 messages"),
        ):
            async with s.post(
                gw.url + "/ui/playground/chat",
                json={"model": "tiny", "messages": turn, **body},
                headers={"X-CSRF-Token": token},
            ) as resp:
                assert resp.status == 400, body
                assert words in (await resp.json())["error"]["message"], body


async def _async(value: bool) -> bool:
    return value
