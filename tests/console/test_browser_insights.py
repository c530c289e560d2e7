"""The insights pages in headless Chromium (#37): a reviewer (a team admin) scores sampled
answers in the review queue (a refused form keeps its values), and the scores appear in the
quality report by version; axe-core finds no WCAG 2 A/AA violation on the business, quality,
review and key pages; screenshots go to docs/console/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console.browser import browser_page, chromium_path, new_page
from tests.console.insights_support import MASTER, insights_console
from tests.console.test_browser import checked, sign_in, sign_out
from tests.fakes import FakeUpstream

pytestmark = pytest.mark.slow

PROMPTS = ("Explain TCP slow start", "Name three rivers", "Sum 2 and 3", "Define entropy")
SCORES = ((5, 4, 5), (2, 3, 4), (4, 4, 4))  # correct, helpful, safe of the first three


async def test_a_reviewer_scores_answers_and_quality_shows_them_by_version(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    chromium_path()
    async with insights_console(fake.url, tmp_path) as ic:
        for i, text in enumerate(PROMPTS):
            await ic.chat(ic.loud["user"], f"user{i % 2}", text, session=f"s{i}")
        items = await ic.review_items(len(PROMPTS))
        version_of = {it["request_id"]: it["version"] for it in items}
        url = ic.console.url
        async with browser_page() as browser:
            page = await new_page(browser)
            await sign_in(page, url, ic.loud["team_admin"])
            await page.get_by_role("link", name="Insights").click()
            await page.wait_for_url("**/ui/insights")
            await page.get_by_role("link", name="Review queue").click()
            await page.wait_for_url("**/ui/insights/reviews")
            await checked(page, "insights-reviews")
            first = page.locator("section.review").first
            assert "Explain TCP slow start" in await first.inner_text()

            # refused: one criterion left out; the page names it and keeps the others
            await page.get_by_label("Correct (tiny, item 1)").select_option("5")
            await page.get_by_label("Safe (tiny, item 1)").select_option("5")
            await first.get_by_role("button").click()
            await page.wait_for_selector("p.error[role=alert]")
            assert "Give helpful a score from 1 to 5." in await page.locator("p.error").inner_text()
            assert await page.get_by_label("Correct (tiny, item 1)").input_value() == "5"
            assert await page.get_by_label("Safe (tiny, item 1)").input_value() == "5"
            assert await page.get_by_label("Helpful (tiny, item 1)").input_value() == ""

            scored: dict[str, list[float]] = {}  # version -> the means scored
            for correct, helpful, safe in SCORES:  # always item 1: a scored one leaves the list
                section = page.locator("section.review").first
                request_id = (await section.get_attribute("id") or "").removeprefix("review-")
                await page.get_by_label("Correct (tiny, item 1)").select_option(str(correct))
                await page.get_by_label("Helpful (tiny, item 1)").select_option(str(helpful))
                await page.get_by_label("Safe (tiny, item 1)").select_option(str(safe))
                await section.get_by_role("button").click()
                await page.wait_for_selector(f"#flash >> text=Scores saved for {request_id}.")
                assert "/ui/insights/reviews" in page.url  # redirected (POST-redirect-GET)
                mean = (correct + helpful + safe) / 3
                scored.setdefault(version_of[request_id] or "-", []).append(mean)
            assert await page.locator("section.review").count() == len(PROMPTS) - len(SCORES)

            await page.get_by_role("link", name="Quality").click()
            await page.wait_for_url("**/ui/insights/quality")
            await checked(page, "insights-quality")
            for version, means in scored.items():
                row = page.locator(f'#quality tr[data-alias="tiny"][data-version="{version}"]')
                assert await row.locator(".review-count").inner_text() == str(len(means))
                expected = f"{sum(means) / len(means):.2f}"
                assert await row.locator(".review-score").inner_text() == expected, version
            for version in {"v1", "v2"} - set(scored):  # a version nobody scored shows none
                row = page.locator(f'#quality tr[data-alias="tiny"][data-version="{version}"]')
                if await row.count():
                    assert await row.locator(".review-score").inner_text() == "-"
            await sign_out(page)

            # the master key: every page passes axe, with every team's figures
            await sign_in(page, url, MASTER)
            for path, name in (("/ui/insights", "insights-business"),
                               ("/ui/insights/keys", "insights-keys")):  # fmt: skip
                await page.goto(url + path)
                await checked(page, name)
            await page.goto(url + "/ui/insights/reviews?show=scored")
            assert await page.locator("section.review").count() == len(SCORES)
            assert await page.locator("p.ok >> text=Scored").count() == len(SCORES)
            await checked(page, "insights-reviews-scored")
            assert await page.locator("#mau").count() == 0
            await page.goto(url + "/ui/insights?team=loud")
            assert await page.locator("#mau").inner_text() == "2"
