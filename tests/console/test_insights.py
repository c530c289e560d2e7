"""The console's insights pages over HTTP, on SQLite and PostgreSQL: business figures equal to
the admin API's, quality by alias and version, key hygiene by name, the review queue (payload
policy on the page, POST-redirect-GET, refused scores keep their values, a team admin inside
its team), and a page saying so when the section is off."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
from sqlalchemy import insert

from fleetgate.insights.tables import reviews
from tests.console.insights_support import MASTER, InsightsConsole, insights_console
from tests.console.support import csrf_of
from tests.fakes import FakeUpstream

PAGES = ("/ui/insights", "/ui/insights/quality", "/ui/insights/reviews", "/ui/insights/keys")


async def _get(browser: aiohttp.ClientSession, url: str, **params: str) -> tuple[int, str]:
    async with browser.get(url, params=params, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def _post(
    browser: aiohttp.ClientSession, url: str, data: dict[str, str]
) -> tuple[int, str, str]:
    async with browser.post(url, data=data, allow_redirects=False) as resp:
        return resp.status, resp.headers.get("Location", ""), await resp.text()


def _stat(html: str, ident: str) -> str:
    match = re.search(rf'id="{ident}">([^<]*)<', html)
    assert match is not None, ident
    return match.group(1)


async def _seed(ic: InsightsConsole) -> list[str]:
    ids = [
        await ic.chat(ic.loud["user"], "alice", "What is the capital of France?"),
        await ic.chat(ic.loud["user"], "bob", "Write a haiku", session="s2"),
        await ic.chat(ic.quiet["user"], "carol", "secret question"),
    ]
    await ic.review_items(2)  # loud's two; quiet does not log payloads: never sampled
    return ids


async def test_insights_pages(fake: FakeUpstream, db_url: str, tmp_path: Path) -> None:
    async with insights_console(fake.url, tmp_path, db_url) as ic:
        c = ic.console
        ids = await _seed(ic)
        # an item of the quiet team, as if sampled before it stopped logging payloads
        async with c.feature.console.tenancy.db.engine.begin() as conn:
            await conn.execute(insert(reviews).values(
                request_id="old-quiet-item", created_ms=1, team_id=ic.quiet["id"], alias="tiny",
                version="v1", prompt=[{"role": "user", "content": "PRIVATE PROMPT"}],
                response="PRIVATE ANSWER",
            ))  # fmt: skip
        browser = await c.signed_in(MASTER)
        try:
            for page in PAGES:
                status, html = await _get(browser, c.url + page)
                assert status == 200, (page, html[:500])
                assert 'href="/ui/insights" aria-current="page"' in html  # the nav entry
            status, html = await _get(browser, c.url + "/ui/insights")
            _, api = await c.admin("GET", "/admin/insights/business")
            assert _stat(html, "mau") == str(api["mau"]) == "3"
            assert _stat(html, "dau") == str(api["dau"][-1]["users"]) == "3"
            assert _stat(html, "active") == "3"
            # cut to one team, by name
            status, html = await _get(browser, c.url + "/ui/insights", team="loud")
            assert status == 200 and _stat(html, "mau") == "2"
            assert f'title="{ic.loud["id"]}">loud</span>' in html  # its name, the id on hover
            status, _ = await _get(browser, c.url + "/ui/insights", team="nope")
            assert status == 404
            for bad in ({"since": "yesterday"}, {"since": "2026-02-01", "until": "2026-01-01"},
                        {"since": "2020-01-01", "until": "2026-01-01"}):  # fmt: skip
                status, _ = await _get(browser, c.url + "/ui/insights/quality", **bad)
                assert status == 400, bad

            status, html = await _get(browser, c.url + "/ui/insights/quality")
            row = re.search(r'<tr data-alias="tiny" data-version="(v[12])">(.*?)</tr>', html, re.S)
            assert row is not None, html
            _, quality = await c.admin("GET", "/admin/insights/quality")
            assert sum(q["requests"] for q in quality["data"]) == 3
            assert '<td class="num">' in row.group(2)

            status, html = await _get(browser, c.url + "/ui/insights/keys")
            assert status == 200 and "never expires" in html
            assert ">loud</span>" in html and ">quiet</span>" in html  # teams by name
            status, _ = await _get(browser, c.url + "/ui/insights/keys", days="0")
            assert status == 400

            # the queue: loud's prompts shown, the quiet team's withheld
            status, html = await _get(browser, c.url + "/ui/insights/reviews")
            assert "What is the capital of France?" in html and "Write a haiku" in html
            assert "PRIVATE" not in html and "Not shown: this team does not keep payloads" in html
            assert "secret question" not in html
            _, listed = await c.admin("GET", "/admin/insights/reviews")  # the API withholds too
            old = next(r for r in listed["data"] if r["request_id"] == "old-quiet-item")
            assert old["payload_withheld"] and old["prompt"] is None and old["response"] is None
            assert not any(r["payload_withheld"] for r in listed["data"] if r is not old)
            token = csrf_of(html)
            item = ids[0]
            # refused: a criterion left out; the page again, 400, the chosen values kept
            status, _, html = await _post(
                browser, c.url + f"/ui/insights/reviews/{item}",
                {"csrf": token, "correct": "4", "helpful": "", "safe": "5"},
            )  # fmt: skip
            assert status == 400 and "Give helpful a score from 1 to 5." in html
            form = html[html.index(f"/ui/insights/reviews/{item}") :]
            form = form[: form.index("</form>")]
            assert re.search(r'name="correct".*?<option value="4" selected>', form, re.S)
            assert re.search(r'name="safe".*?<option value="5" selected>', form, re.S)
            # no CSRF token: refused
            status, _, _ = await _post(browser, c.url + f"/ui/insights/reviews/{item}",
                                       {"correct": "4", "helpful": "3", "safe": "5"})  # fmt: skip
            assert status == 403
            # accepted: redirect (POST-redirect-GET), flash once, audited, in the quality report
            status, location, _ = await _post(
                browser, c.url + f"/ui/insights/reviews/{item}?show=unscored",
                {"csrf": token, "correct": "4", "helpful": "3", "safe": "5"},
            )  # fmt: skip
            assert status == 302 and location == "/ui/insights/reviews?show=unscored"
            status, html = await _get(browser, c.url + location)
            assert f"Scores saved for {item}." in html
            assert "What is the capital of France?" not in html  # scored: off the unscored list
            status, html = await _get(browser, c.url + location)
            assert f"Scores saved for {item}." not in html  # shown once
            status, html = await _get(browser, c.url + "/ui/insights/reviews", show="scored")
            assert "Scored 4.00: correct 4, helpful 3, safe 5 by master key" in html
            _, audit = await c.admin("GET", "/admin/audit?kind=admin&q=insights.review")
            assert any(e.get("target") == item for e in audit["data"]), audit
            _, quality = await c.admin("GET", "/admin/insights/quality")
            scored = [q for q in quality["data"] if q["reviews_scored"]]
            assert len(scored) == 1 and scored[0]["review_score"] == 4.0
            status, html = await _get(browser, c.url + "/ui/insights/quality")
            assert '<td class="num review-score">4.00</td>' in html
            status, _, _ = await _post(browser, c.url + "/ui/insights/reviews/no-such-item",
                                       {"csrf": token, "correct": "1", "helpful": "1",
                                        "safe": "1"})  # fmt: skip
            assert status == 404
        finally:
            await browser.close()

        # a team admin: its own team only; a plain key: not these pages
        admin = await c.signed_in(ic.quiet["team_admin"])
        try:
            status, html = await _get(admin, c.url + "/ui/insights/reviews")
            assert status == 200 and "Write a haiku" not in html
            assert "Not shown: this team does not keep payloads" in html  # its old item
            status, _ = await _get(admin, c.url + "/ui/insights", team="loud")
            assert status == 403
            status, html = await _get(admin, c.url + "/ui/insights")
            assert _stat(html, "mau") == "1"
            status, html = await _get(admin, c.url + "/ui/insights/reviews")
            status, _, _ = await _post(
                admin, c.url + f"/ui/insights/reviews/{ids[1]}",
                {"csrf": csrf_of(html), "correct": "1", "helpful": "1", "safe": "1"},
            )  # fmt: skip
            assert status == 404  # loud's item is not the quiet team's to score
        finally:
            await admin.close()
        user = await c.signed_in(ic.loud["user"])
        try:
            for page in PAGES:
                status, _ = await _get(user, c.url + page)
                assert status == 403, page
        finally:
            await user.close()


async def test_without_insights_the_pages_say_so(fake: FakeUpstream, tmp_path: Path) -> None:
    from tests.console.support import running_console

    async with running_console(fake.url, tmp_path) as c:
        browser = await c.signed_in(MASTER)
        try:
            for page in PAGES:
                status, html = await _get(browser, c.url + page)
                assert status == 200 and "Insights are not configured" in html, page
        finally:
            await browser.close()


async def test_no_query_value_on_an_insights_page_is_a_500(
    fake: FakeUpstream, db_url: str, tmp_path: Path
) -> None:
    from tests.console.test_query_values import DATES, VALUES

    params = ("page", "team", "show", "alias", "days")
    async with insights_console(fake.url, tmp_path, db_url) as ic:
        c = ic.console
        browser = await c.signed_in(MASTER)
        try:
            failures = []
            for page in PAGES:
                queries = [{"since": d} for d in DATES] + [{"until": d} for d in DATES]
                queries += [{"since": "1970-01-01", "until": "9999-12-31"},
                            {"since": "9999-12-01", "until": "9999-12-31"}]  # fmt: skip
                queries += [{p: v} for p in params for v in VALUES]
                for query in queries:
                    async with browser.get(c.url + page, params=query) as resp:
                        await resp.read()
                        if resp.status >= 500:
                            failures.append((page, query, resp.status))
            assert failures == [], failures
        finally:
            await browser.close()
