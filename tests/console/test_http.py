"""The console over plain HTTP: sign-in, cookies, CSRF, roles and tenancy isolation, CSV."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from tests.console.support import MASTER, Console, csrf_of


async def _team_key(c: Console, team: str, role: str = "user") -> tuple[str, str, str]:
    status, t = await c.admin("POST", "/admin/teams", json={"name": team})
    assert status == 201, t
    status, k = await c.admin("POST", "/admin/keys", json={"team": t["id"], "role": role})
    assert status == 201, k
    return t["id"], k["id"], k["key"]


async def test_pages_need_a_session_and_the_cookie_is_http_only(console: Console) -> None:
    async with console.http.get(console.url + "/ui/teams", allow_redirects=False) as resp:
        assert resp.status == 302
        assert resp.headers["Location"].startswith("/ui/login")
    async with console.http.get(console.url + "/ui/spend.csv") as resp:
        assert resp.url.path == "/ui/login" and "Sign in" in await resp.text()
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        async with s.get(console.url + "/ui/login") as resp:
            token = csrf_of(await resp.text())
        async with s.post(
            console.url + "/ui/login", data={"key": MASTER, "csrf": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 302
            assert resp.headers["Location"] == "/ui/overview"
            cookie = resp.cookies["fg_session"]
            assert cookie["httponly"] is True
            assert cookie["samesite"] == "Lax"
        async with s.get(console.url + "/ui/overview") as resp:
            assert resp.status == 200
            assert "Overview" in await resp.text()


async def test_sign_in_refuses_a_wrong_key_and_a_missing_token(console: Console) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        async with s.get(console.url + "/ui/login") as resp:
            token = csrf_of(await resp.text())
        async with s.post(
            console.url + "/ui/login", data={"key": "sk-nope", "csrf": token}
        ) as resp:
            assert resp.status == 401
            assert "not valid" in await resp.text()
        async with s.post(console.url + "/ui/login", data={"key": MASTER, "csrf": "x"}) as resp:
            assert resp.status == 403  # the double-submitted token does not match
    assert await console.open_sessions() == 0  # neither attempt opened one


async def test_every_state_changing_form_needs_the_session_csrf_token(console: Console) -> None:
    s = await console.signed_in(MASTER)
    async with s:
        async with s.post(console.url + "/ui/teams", data={"name": "no-token"}) as resp:
            assert resp.status == 403
        async with s.get(console.url + "/ui/teams") as resp:
            token = csrf_of(await resp.text())
        async with s.post(
            console.url + "/ui/teams", data={"name": "with-token", "csrf": token}
        ) as resp:
            assert resp.status == 200 and "Team with-token" in await resp.text()
        status, teams = await console.admin("GET", "/admin/teams")
        assert [t["name"] for t in teams["data"]] == ["with-token"]
        async with s.post(
            console.url + "/ui/playground/chat", json={"model": "tiny", "messages": []}
        ) as resp:
            assert resp.status == 403  # no X-CSRF-Token header


async def test_a_new_key_is_shown_once_and_revoking_it_ends_its_use(console: Console) -> None:
    team_id, _, _ = await _team_key(console, "search")
    s = await console.signed_in(MASTER)
    async with s:
        async with s.get(console.url + f"/ui/teams/{team_id}") as resp:
            token = csrf_of(await resp.text())
        form = {"csrf": token, "role": "user", "rpm": "60", "max_budget_usd": "5"}
        async with s.post(
            console.url + f"/ui/teams/{team_id}/keys", data=form, allow_redirects=False
        ) as resp:  # POST-redirect-GET: the key is not in the POST's answer nor its URL
            assert resp.status == 302
            assert resp.headers["Location"] == f"/ui/teams/{team_id}"
            assert "sk-fg-" not in await resp.text()
        async with s.get(console.url + resp.headers["Location"]) as resp:
            html = await resp.text()
        key = html.split('id="new-key">', 1)[1].split("<", 1)[0]
        assert key.startswith("sk-fg-")
        async with s.get(console.url + f"/ui/teams/{team_id}") as resp:  # the flash was once
            assert key not in await resp.text()
        assert await console.chat(key) == 200
        status, keys = await console.admin("GET", f"/admin/keys?team={team_id}")
        made = next(k for k in keys["data"] if k["rpm"] == 60)
        assert made["max_budget_usd"] == 5.0 and made["budget_period"] == "monthly"
        revoke = console.url + f"/ui/keys/{made['id']}/revoke"
        async with s.post(revoke, data={"csrf": token, "team": team_id}) as resp:
            assert resp.status == 200  # a confirmation page: nothing revoked yet
            assert f"Revoke key {made['id']}?" in await resp.text()
        assert await console.chat(key) == 200
        async with s.post(
            revoke,
            data={"csrf": token, "team": team_id, "confirmed": "yes"},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 302

    async def refused() -> bool:
        return await console.chat(key) == 401

    for _ in range(40):  # the key cache reloads within the poll interval
        if await refused():
            break
        await asyncio.sleep(0.05)
    assert await refused()


async def test_a_team_admin_sees_only_its_own_team(console: Console) -> None:
    mine, _, admin_key = await _team_key(console, "search", role="team_admin")
    other, other_key_id, _ = await _team_key(console, "ads")
    s = await console.signed_in(admin_key)
    async with s:
        async with s.get(console.url + "/ui/teams") as resp:
            html = await resp.text()
            assert "search" in html and "ads" not in html
        async with s.get(console.url + f"/ui/teams/{other}") as resp:
            assert resp.status == 404
        async with s.get(console.url + "/ui/teams/ads") as resp:
            assert resp.status == 404
        async with s.get(console.url + f"/ui/spend?team={other}") as resp:
            assert resp.status == 403
        async with s.get(console.url + f"/ui/spend.csv?team={other}") as resp:
            assert resp.status == 403
        async with s.get(console.url + "/ui/spend.csv?group=team") as resp:
            assert other not in await resp.text()
        async with s.get(console.url + "/ui/guardrails") as resp:
            assert resp.status == 403
        async with s.get(console.url + f"/ui/teams/{mine}") as resp:
            token = csrf_of(await resp.text())
        async with s.post(
            console.url + f"/ui/keys/{other_key_id}/revoke",
            data={"csrf": token, "confirmed": "yes"},
        ) as resp:
            assert resp.status == 404
    # ... and the JSON behind the pages
    assert (await console.admin("GET", f"/admin/teams/{other}", admin_key))[0] == 404
    assert (await console.admin("GET", f"/admin/keys?team={other}", admin_key))[0] == 403
    assert (await console.admin("GET", f"/admin/spend?team={other}", admin_key))[0] == 403
    status, audit = await console.admin("GET", "/admin/audit", admin_key)
    assert status == 200 and all(other not in str(r) for r in audit["data"])


async def test_a_finance_viewer_sees_spend_of_every_team_and_nothing_else(
    console: Console,
) -> None:
    _, _, user_key = await _team_key(console, "search")
    status, finance = await console.admin(
        "POST", "/admin/keys", json={"team": "search", "role": "finance_viewer"}
    )
    assert status == 201
    assert await console.chat(user_key) == 200
    s = await console.signed_in(finance["key"])
    async with s:
        for path in ("/ui/teams", "/ui/overview", "/ui/audit", "/ui/models", "/ui/playground"):
            async with s.get(console.url + path) as resp:
                assert resp.status == 403, path
        for _ in range(40):  # the spend writer flushes every 50 ms
            async with s.get(console.url + "/ui/spend.csv?group=team") as resp:
                assert resp.status == 200
                rows = list(csv.DictReader(io.StringIO(await resp.text())))
            if rows:
                break
            await asyncio.sleep(0.05)
        assert [r["team_name"] for r in rows] == ["search"]
        assert rows[0]["requests"] == "1" and float(rows[0]["spend_usd"]) > 0
    # the finance key is no admin key for the JSON admin API
    assert (await console.admin("GET", "/admin/teams", finance["key"]))[0] == 403


async def test_bad_query_values_are_400_not_500(console: Console) -> None:
    s = await console.signed_in(MASTER)
    async with s:
        for path in (
            "/ui/spend?group=nope",
            "/ui/spend?since=yesterday",
            "/ui/spend?since=2026-02-01&until=2026-01-01",
            "/ui/spend?page=0",
            "/ui/audit?kind=nope",
            "/ui/audit?q=" + "x" * 300,
        ):
            async with s.get(console.url + path) as resp:
                assert resp.status == 400, path


async def test_a_browser_gets_a_refusal_as_a_page_and_a_program_as_json(
    console: Console,
) -> None:
    other, _, _ = await _team_key(console, "ads")
    _, _, admin_key = await _team_key(console, "search", role="team_admin")
    s = await console.signed_in(admin_key)
    async with s:
        page = {"Accept": "text/html,application/xhtml+xml"}
        async with s.get(console.url + f"/ui/teams/{other}", headers=page) as resp:
            assert resp.status == 404 and resp.content_type == "text/html"
            assert "Not found" in await resp.text()
        async with s.get(console.url + f"/ui/teams/{other}") as resp:
            assert resp.status == 404 and (await resp.json())["error"]["type"] == "not_found_error"


async def test_limits_and_budgets_change_from_the_team_page(console: Console) -> None:
    team_id, key_id, key = await _team_key(console, "search")
    _, _, admin_key = await _team_key(console, "ads", role="team_admin")
    s = await console.signed_in(MASTER)
    async with s:
        async with s.get(console.url + f"/ui/teams/{team_id}") as resp:
            html = await resp.text()
            token = csrf_of(html)
            assert f"Limits of {key_id}" in html
        async with s.post(
            console.url + f"/ui/teams/{team_id}/limits",
            data={"csrf": token, "max_budget_usd": "40", "budget_period": "weekly"},
        ) as resp:
            assert resp.status == 200 and "$40.0000 weekly" in await resp.text()
        async with s.post(
            console.url + f"/ui/keys/{key_id}/limits",
            data={"csrf": token, "team": team_id, "rpm": "1"},
        ) as resp:
            assert resp.status == 200
    status, keys = await console.admin("GET", f"/admin/keys?team={team_id}")
    assert next(k for k in keys["data"] if k["id"] == key_id)["rpm"] == 1
    statuses = [await console.chat(key) for _ in range(30)]  # the cache reloads within 0.2 s
    assert 429 in statuses
    status, audit = await console.admin("GET", "/admin/audit")
    assert {"team.limits", "key.limits"} <= {r["action"] for r in audit["data"]}
    a = await console.signed_in(admin_key)  # another team's admin
    async with a:
        async with a.get(console.url + "/ui/teams/ads") as resp:
            token = csrf_of(await resp.text())
        async with a.post(
            console.url + f"/ui/keys/{key_id}/limits", data={"csrf": token, "rpm": "999"}
        ) as resp:
            assert resp.status == 404
        async with a.post(
            console.url + f"/ui/teams/{team_id}/limits", data={"csrf": token, "rpm": "999"}
        ) as resp:
            assert resp.status == 403


async def test_static_files_and_the_npm_package_are_served(console: Console) -> None:
    from tests.console.browser import AXE

    if not AXE.parent.parent.is_dir():
        pytest.skip("the console's npm packages are not installed (make, or npm ci)")
    async with console.http.get(console.url + "/ui/vendor/htmx.min.js") as resp:
        assert resp.status == 200 and "htmx" in await resp.text()
    async with console.http.get(console.url + "/ui/static/console.css") as resp:
        assert resp.status == 200 and resp.content_type == "text/css"
    async with console.http.get(console.url + "/ui/vendor/axe.min.js") as resp:
        assert resp.status == 404  # only the named files, nothing else from node_modules


async def test_signing_in_returns_to_the_page_asked_for(console: Console) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        async with s.get(console.url + "/ui/spend?group=alias", allow_redirects=False) as resp:
            login = resp.headers["Location"]
        assert parse_qs(urlsplit(login).query) == {"next": ["/ui/spend?group=alias"]}
        async with s.get(console.url + login) as resp:
            html = await resp.text()
        assert 'name="next" value="/ui/spend?group=alias"' in html
        async with s.post(
            console.url + "/ui/login",
            data={"key": MASTER, "csrf": csrf_of(html), "next": "/ui/spend?group=alias"},
            allow_redirects=False,
        ) as resp:
            assert resp.headers["Location"] == "/ui/spend?group=alias"


async def test_the_spend_csv_marks_tab_and_cr_led_cells_as_text(console: Console) -> None:
    """A key's tags are the caller's text: a tag starting with TAB or CR (that a spreadsheet
    strips before running the ``=`` behind it) comes out of the CSV with a leading ``'``."""
    team_id, _, _ = await _team_key(console, "search")
    tags = {"\t=HYPERLINK(1)": "x", "\r@SUM(1)": "y", "plain": "-2"}
    status, key = await console.admin("POST", "/admin/keys", json={"team": team_id, "tags": tags})
    assert status == 201, key
    assert await console.chat(key["key"]) == 200
    async with await console.signed_in(MASTER) as s:
        for _ in range(40):  # the spend writer flushes every 50 ms
            async with s.get(console.url + "/ui/spend.csv?group=tag") as resp:
                assert resp.status == 200
                rows = list(csv.DictReader(io.StringIO(await resp.text())))
            if len(rows) == 3:
                break
            await asyncio.sleep(0.05)
    assert sorted(r["tag"] for r in rows) == ["'\t=HYPERLINK(1)=x", "'\r@SUM(1)=y", "plain=-2"]


async def test_the_playground_streams_an_answer_through_the_gateway(console: Console) -> None:
    s = await console.signed_in(MASTER)
    async with s:
        async with s.get(console.url + "/ui/playground") as resp:
            token = csrf_of(await resp.text())
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        async with s.post(
            console.url + "/ui/playground/chat", json=body, headers={"X-CSRF-Token": token}
        ) as resp:
            assert resp.status == 200
            assert resp.content_type == "text/event-stream"
            text = await resp.text()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    said = "".join(c["delta"].get("content") or "" for k in chunks for c in k["choices"])
    assert said == "Hello there." and chunks[-1]["usage"]["completion_tokens"] > 0
    # relayed on the resource owner's outbound session, not one of the console's own
    assert console.gw.resources.http.sessions_opened == 1
