"""The release pipeline's timeline in headless Chromium, on a real run: a gateway process with
simulator engines, versions registered through the admin API while the pages are open. The runs
list shows each new run and the timeline fills in step by step through htmx (no reload), up to
the promotion; v2's page shows its progressive rollout (traffic share, decisions) and the kept
versions. axe-core passes on both pages; screenshots go to docs/console/."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import accessibility_violations, browser_page, chromium_path, new_page
from tests.console.browser import screenshot as shot
from tests.releases.pipeline_support import (
    MASTER,
    GatewayProcess,
    Traffic,
    free_port,
    gateway_config,
    sim_version,
    write_suites,
)
from tests.releases.test_pipeline import _stop_all

pytestmark = pytest.mark.slow

RUN_TIMEOUT_MS = 240_000


async def sign_in(page: Any, url: str) -> None:
    await page.goto(url + "/ui")
    await page.get_by_label("API key").fill(MASTER)
    await page.get_by_role("button", name="Sign in with a key").click()
    await page.wait_for_load_state()
    assert "/ui/login" not in page.url


async def no_violations(page: Any, name: str) -> None:
    await shot(page, name)
    assert await accessibility_violations(page) == [], name


async def still_same_document(page: Any) -> bool:
    """Whether the page was never reloaded since `mark_document` (htmx swapped, no navigation)."""
    return bool(await page.evaluate("window.__timelineMark === 1"))


async def test_a_pipeline_run_appears_step_by_step_in_the_console(tmp_path: Path) -> None:
    chromium_path()
    golden, _ = write_suites(tmp_path, golden_items=24, max_tokens=32)
    config = gateway_config(golden, None, steps=[50, 100], interval_s=1.0, min_samples=5,
                            concurrency=4)  # fmt: skip
    gw = GatewayProcess(tmp_path, config)
    ports = [free_port(), free_port()]
    await gw.start()
    try:
        async with browser_page() as browser:
            page = await new_page(browser)
            await sign_in(page, gw.url)
            # from the registry page to the (empty) runs list
            await page.goto(gw.url + "/ui/registry")
            await page.get_by_role("link", name="Release pipelines").click()
            await page.wait_for_url("**/ui/pipelines")
            assert await page.get_by_text("No pipeline run").count() == 1
            await page.evaluate("window.__timelineMark = 1")

            assert (await gw.admin("POST", "/admin/registry/models", {"name": "chat"}))[0] == 201
            status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                          sim_version(1, ports[0]))  # fmt: skip
            assert status == 201, body
            # the list refreshes itself: the new run's link appears without a reload
            link = page.get_by_role("link", name="v1", exact=True)
            await link.wait_for(timeout=30_000)
            assert await still_same_document(page)
            await no_violations(page, "pipelines")
            await link.click()
            await page.wait_for_url("**/ui/pipelines/chat/v1")
            await page.evaluate("window.__timelineMark = 1")

            # the timeline fills in as the run goes: each step appears done, in order
            seen: list[str] = []
            started = time.monotonic()
            for step in ("instance_up", "suites", "gate", "instance_down", "production_up",
                         "rollout", "keep"):  # fmt: skip
                row = page.locator(f'#steps tr[data-step="{step}"][data-status="done"]')
                await row.wait_for(timeout=RUN_TIMEOUT_MS)
                seen.append(step)
                if step == "suites":  # mid-run: the page as it refreshes
                    await no_violations(page, "pipeline-running")
            assert await still_same_document(page)  # htmx swapped every change in
            status_text = page.locator("#pipeline-status")
            await page.wait_for_function(
                "document.getElementById('pipeline-status').textContent.trim() === 'released'",
                timeout=30_000,
            )
            assert (await status_text.inner_text()).strip() == "released"
            gate = await page.locator("#gate-rules").inner_text()
            assert "golden" in gate and "pass" in gate
            assert "Promoted directly" in await page.locator("#main").inner_text()
            print(f"\nv1 released in the console after {time.monotonic() - started:.1f} s")

            # v2 under live traffic: the rollout's share and decisions while it moves
            async with Traffic(gw.url):
                status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                              sim_version(2, ports[1]))  # fmt: skip
                assert status == 201, body
                for _ in range(300):
                    if (await gw.admin("GET", "/admin/pipelines/chat/v2"))[0] == 200:
                        break
                    await page.wait_for_timeout(100)
                await page.goto(gw.url + "/ui/pipelines/chat/v2")
                await page.evaluate("window.__timelineMark = 1")
                share = page.locator("#rollout-share")
                await share.wait_for(timeout=RUN_TIMEOUT_MS)
                text = await share.inner_text()
                assert "v1 → v2" in text and "% of" in text, text
                await no_violations(page, "pipeline-rollout")
                await page.wait_for_function(
                    "document.getElementById('pipeline-status').textContent.trim() === 'released'",
                    timeout=RUN_TIMEOUT_MS,
                )
            assert await still_same_document(page)
            share_text = await page.locator("#rollout-share").inner_text()
            assert "completed" in share_text and "100" in share_text, share_text
            assert await page.locator("#decisions tbody tr").count() >= 1
            kept = await page.locator("#kept").inner_text()
            assert "v2" in kept and "v1" in kept, kept
            await no_violations(page, "pipeline-released")
    finally:
        await _stop_all(gw)
