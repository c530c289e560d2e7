"""A refused promotion on a model's registry page keeps the form as it was sent (#35), in
headless Chromium: the stage picked and the force box stay on the version's own form, the
refusal is in words, the other versions' forms are untouched, and nothing moved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import accessibility_violations, browser_page, chromium_path, new_page
from tests.console.support import MASTER, Console, running_console
from tests.console.test_browser import sign_in
from tests.console.test_pages import SUITE, _config, _registered
from tests.fakes import FakeUpstream

pytestmark = pytest.mark.slow


@pytest.fixture
async def gw(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path, config=_config(fake.url)) as c:
        yield c


async def _stages(gw: Console) -> dict[str, str | None]:
    status, model = await gw.admin("GET", "/admin/registry/models/chat")
    assert status == 200, model
    stages: dict[str, str | None] = model["stages"]
    return stages


def _force(page: Any, version: str) -> Any:
    """The "past a failing gate" box of ``version``'s form."""
    form = page.locator("form", has=page.get_by_role("button", name=f"Promote {version}"))
    return form.get_by_label("Past a failing gate")


async def test_a_refused_promotion_keeps_its_stage_and_force(
    gw: Console, fake: FakeUpstream
) -> None:
    chromium_path()
    await _registered(gw, fake.url, 3)
    runs = "/admin/registry/models/chat/versions/{}/evals"
    for version, score in (("v1", 0.95), ("v2", 0.5), ("v3", 0.4)):
        body = {**SUITE, "metrics": {"golden": score}}
        assert (await gw.admin("POST", runs.format(version), json=body))[0] == 201
    status, _ = await gw.admin(
        "POST", "/admin/registry/models/chat/promote", json={"stage": "staging", "version": "v1"}
    )
    assert status == 200
    async with browser_page() as browser:
        page = await new_page(browser)
        await sign_in(page, gw.url, MASTER)
        await page.goto(gw.url + "/ui/registry/chat")

        # v2's gate fails: refused in words, its form as sent (production, box unticked)
        await page.get_by_label("Stage for v2").select_option("production")
        await page.get_by_role("button", name="Promote v2").click()
        await page.wait_for_selector("#form-error")
        error = await page.locator("#form-error").inner_text()
        assert "gate of 'chat' is fail" in error, error
        assert await page.get_by_label("Stage for v2").input_value() == "production"
        assert not await _force(page, "v2").is_checked()
        assert (await _stages(gw)).get("production") is None  # nothing moved
        assert await accessibility_violations(page) == []

        # a stage the page does not offer (a stale page, a careless client) with the box
        # ticked: 400, the field named by its label, and the form as sent (that stage, the
        # box ticked), not reset to production and unticked; the other forms untouched
        await page.get_by_label("Stage for v3").evaluate(
            "(sel) => { sel.add(new Option('bad stage!', 'bad stage!', true, true)); }"
        )
        await _force(page, "v3").check()
        async with page.expect_navigation():
            await page.get_by_role("button", name="Promote v3").click()
        error = await page.locator("#form-error").inner_text()
        assert error.startswith("Stage must be a name of letters"), error
        assert "'stage'" not in await page.content()
        assert await page.get_by_label("Stage for v3").input_value() == "bad stage!"
        assert await _force(page, "v3").is_checked()
        assert await page.get_by_label("Stage for v2").input_value() == "production"
        assert not await _force(page, "v2").is_checked()
        assert (await _stages(gw))["staging"] == "v1"

        # the kept form, its stage set right: forced through the gate as the box says
        await page.get_by_label("Stage for v3").select_option("production")
        await page.get_by_role("button", name="Promote v3").click()
        await page.wait_for_url("**/ui/registry/chat")
        assert await page.locator("#form-error").count() == 0
        assert (await _stages(gw))["production"] == "v3"
