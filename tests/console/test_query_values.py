"""Bad, huge or out-of-range query values on the console's pages are a 400 (or are clamped),
never a 500, on SQLite and PostgreSQL (finding 12 of #31: ``/ui/spend?until=9999-12-31``)."""

from __future__ import annotations

from pathlib import Path

from tests.console.support import MASTER, csrf_of, running_console
from tests.fakes import FakeUpstream

PAGES = (
    "/ui/overview", "/ui/teams", "/ui/spend", "/ui/spend.csv", "/ui/models", "/ui/registry",
    "/ui/registry/chat", "/ui/queues", "/ui/routing", "/ui/audit", "/ui/guardrails",
    "/ui/playground", "/ui/teams/nope",
)  # fmt: skip
DATES = ("9999-12-31", "9999-12-30", "0001-01-01", "1969-12-31", "99999-01-01", "2024-02-30",
         "2024-W01-1", "20240101", "x" * 5000, "2024-01-01\x00", "")  # fmt: skip
VALUES = ("0", "-1", "999999", "9999999999999999999999", "1e400", "nan", "\x00", "x" * 5000,
          "%", "'")  # fmt: skip
PARAMS = ("page", "group", "team", "kind", "q", "flagged", "key_id", "alias", "reason")


async def test_no_query_value_on_a_page_is_a_500(
    fake: FakeUpstream, db_url: str, tmp_path: Path
) -> None:
    async with running_console(fake.url, tmp_path, database_url=db_url) as console:
        browser = await console.signed_in(MASTER)
        try:
            failures = []
            for page in PAGES:
                queries = [{"since": d} for d in DATES] + [{"until": d} for d in DATES]
                queries += [{"since": "0001-01-01", "until": "9999-12-31"}]
                queries += [{p: v} for p in PARAMS for v in VALUES]
                for query in queries:
                    async with browser.get(console.url + page, params=query) as resp:
                        await resp.read()
                        if resp.status >= 500:
                            failures.append((page, query, resp.status))
            assert failures == [], failures
        finally:
            await browser.close()


async def test_the_last_day_there_is_is_a_report_and_years_outside_are_a_400(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    async with running_console(fake.url, tmp_path) as console:
        browser = await console.signed_in(MASTER)
        try:
            for path in ("/ui/spend", "/ui/spend.csv"):
                query = {"since": "2024-01-01", "until": "9999-12-31"}
                async with browser.get(console.url + path, params=query) as resp:
                    assert resp.status == 200, await resp.text()
                for param in ("since", "until"):
                    headers = {"Accept": "application/json"}
                    async with browser.get(
                        console.url + path, params={param: "1969-12-31"}, headers=headers
                    ) as resp:
                        assert resp.status == 400
                        assert (await resp.json())["error"]["param"] == param
        finally:
            await browser.close()


async def test_no_number_in_a_form_is_a_500(
    fake: FakeUpstream, db_url: str, tmp_path: Path
) -> None:
    """Limits, budgets and canary weights typed into the forms: a 400 (or kept), never a 500."""
    async with running_console(fake.url, tmp_path, database_url=db_url) as console:
        team, key = await console.team_and_key("search")
        browser = await console.signed_in(MASTER)
        try:
            async with browser.get(console.url + "/ui/teams") as resp:
                csrf = csrf_of(await resp.text())
            numbers = ("1e400", "-1e400", "nan", "inf", "-1", "1e30", "999999999999",
                       "0x10", "\x00", "1" * 5000)  # fmt: skip
            posts = []
            for n in numbers:
                for field in ("rpm", "tpm", "max_parallel", "max_budget_usd"):
                    posts += [
                        (f"/ui/teams/{team['id']}/limits", {field: n}),
                        (f"/ui/keys/{key['id']}/limits", {field: n}),
                        (f"/ui/teams/{team['id']}/keys", {field: n}),
                        ("/ui/teams", {"name": f"t{len(posts)}", field: n}),
                    ]
                posts.append(("/ui/models/tiny/split", {"weights": f"v1={n}, v2=10"}))
            failures = []
            for path, form in posts:
                data = {**form, "csrf": csrf}
                async with browser.post(
                    console.url + path, data=data, allow_redirects=False
                ) as resp:
                    await resp.read()
                    if resp.status >= 500:
                        failures.append((path, form, resp.status))
            assert failures == [], failures
        finally:
            await browser.close()
