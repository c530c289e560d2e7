"""OIDC sign-in (authorization code + PKCE) against a local identity provider, groups mapped
to roles and teams; JWT bearer tokens for API callers, limited and billed as their team."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from yarl import URL

from tests.console.idp import LocalIdP, running_idp
from tests.console.support import Console, running_console
from tests.fakes import FakeUpstream


@pytest.fixture
async def idp() -> AsyncIterator[LocalIdP]:
    async with running_idp() as provider:
        yield provider


def sso(idp: LocalIdP) -> dict[str, Any]:
    return {
        "public_url": "http://console.invalid",  # made the server's own once it listens
        "oidc": {
            "issuer": idp.url,
            "client_id": idp.client_id,
            "roles": {"platform": "master", "finance": "finance_viewer"},
            "teams": {"search-admins": "search"},
        },
        "jwt": {"jwks_url": f"{idp.url}/jwks", "issuer": idp.url, "audience": idp.audience},
    }


@pytest.fixture
async def console(fake: FakeUpstream, tmp_path: Path, idp: LocalIdP) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path, **sso(idp)) as c:
        c.at_own_url()
        for name, rpm in (("search", 2), ("ads", None)):
            status, _ = await c.admin("POST", "/admin/teams", json={"name": name, "rpm": rpm})
            assert status == 201
        yield c


async def sso_sign_in(c: Console) -> tuple[aiohttp.ClientSession, aiohttp.ClientResponse]:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(c.url + "/ui/oidc/start") as resp:
        await resp.read()
    return session, resp


async def test_groups_map_to_the_master_role_through_pkce(console: Console, idp: LocalIdP) -> None:
    idp.user = {"sub": "u-1", "email": "ana@example.com", "groups": ["staff", "platform"]}
    session, resp = await sso_sign_in(console)
    async with session:
        assert resp.status == 200 and resp.url.path == "/ui/overview"
        async with session.get(console.url + "/ui/teams") as page:
            html = await page.text()
        assert "ana@example.com" in html and "ads" in html and "search" in html
    (exchange,) = idp.token_requests
    assert exchange["grant_type"] == "authorization_code" and len(exchange["code_verifier"]) >= 43


async def test_a_team_group_signs_in_as_that_teams_admin(console: Console, idp: LocalIdP) -> None:
    idp.user = {"sub": "u-2", "email": "bo@example.com", "groups": ["search-admins"]}
    _, ads = await console.admin("GET", "/admin/teams/ads")
    session, resp = await sso_sign_in(console)
    async with session:
        assert resp.url.path == "/ui/overview"
        async with session.get(console.url + "/ui/teams") as page:
            text = await page.text()
            assert "search" in text and "ads" not in text
        async with session.get(console.url + f"/ui/teams/{ads['id']}") as page:
            assert page.status == 404


async def test_no_mapped_group_no_session(console: Console, idp: LocalIdP) -> None:
    idp.user = {"sub": "u-3", "groups": ["visitors"]}
    session, resp = await sso_sign_in(console)
    async with session:
        assert resp.status == 403
        async with session.get(console.url + "/ui/overview", allow_redirects=False) as page:
            assert page.status == 302  # still signed out


async def test_a_forged_or_replayed_callback_is_refused(console: Console, idp: LocalIdP) -> None:
    idp.user = {"sub": "u-1", "groups": ["platform"]}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        async with s.get(console.url + "/ui/oidc/start", allow_redirects=False) as resp:
            authorize = resp.headers["Location"]
        async with s.get(authorize, allow_redirects=False) as resp:
            callback = resp.headers["Location"]
        forged = callback.replace("state=", "state=x")
        async with s.get(forged, allow_redirects=False) as resp:
            assert resp.status == 401
        async with s.get(callback, allow_redirects=False) as resp:
            assert resp.status == 302  # the genuine one still signs in
        async with s.get(callback, allow_redirects=False) as resp:
            assert resp.status == 401  # ... once: a replay is refused
    async with aiohttp.ClientSession() as other_browser:  # the state cookie is not there
        async with other_browser.get(console.url + "/ui/oidc/start", allow_redirects=False) as r:
            authorize = r.headers["Location"]
        async with other_browser.get(authorize, allow_redirects=False) as r:
            callback = r.headers["Location"]
        async with other_browser.get(callback, allow_redirects=False) as r:
            assert r.status == 401


async def test_a_sign_in_started_on_one_replica_finishes_on_another(
    fake: FakeUpstream, idp: LocalIdP, tmp_path: Path
) -> None:
    """No sign-in state lives in a process: the callback may reach any replica behind the load
    balancer, and the session it opens is valid on every replica."""
    idp.user = {"sub": "u-9", "email": "cy@example.com", "groups": ["platform"]}
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with (
        running_console(fake.url, tmp_path / "a", database_url=url, **sso(idp)) as a,
        running_console(fake.url, tmp_path / "b", database_url=url, **sso(idp)) as b,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
    ):
        a.at_own_url()
        async with browser.get(a.url + "/ui/oidc/start", allow_redirects=False) as resp:
            authorize = resp.headers["Location"]  # started on replica A
        async with browser.get(authorize, allow_redirects=False) as resp:
            callback = resp.headers["Location"]
        callback = callback.replace(a.url, b.url)  # the load balancer sends it to replica B
        async with browser.get(callback, allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"] == "/ui/overview"
            cookies = {c.key: c.value for c in resp.cookies.values()}
        jar = aiohttp.CookieJar(unsafe=True)
        jar.update_cookies(cookies, response_url=URL(a.url))
        async with aiohttp.ClientSession(cookie_jar=jar) as on_a:  # and it is valid on A
            async with on_a.get(a.url + "/ui/teams", allow_redirects=False) as page:
                assert page.status == 200 and "cy@example.com" in await page.text()


async def _chat(c: Console, token: str) -> int:
    return await c.chat(token)


async def test_jwt_bearer_callers_are_limited_and_billed_as_their_team(
    console: Console, idp: LocalIdP
) -> None:
    token = idp.access_token(team="search", sub="svc-batch")
    assert await _chat(console, token) == 200
    assert await _chat(console, token) == 200
    assert await _chat(console, token) == 429  # the team's rpm of 2 applies
    _, team = await console.admin("GET", "/admin/teams/search")
    for _ in range(100):  # both spend rows written (the writer flushes in batches)
        status, report = await console.admin("GET", "/admin/spend?group_by=team,key")
        if report["data"] and report["data"][0]["requests"] >= 2:
            break
        await asyncio.sleep(0.05)
    assert report["data"][0]["team"] == team["id"]
    assert report["data"][0]["key"] == f"jwt:{team['id']}"
    assert report["data"][0]["requests"] == 2


@pytest.mark.parametrize(
    "case",
    ["wrong signature", "expired", "unknown team", "wrong audience", "no team"],
)
async def test_bad_jwt_bearers_are_401(console: Console, idp: LocalIdP, case: str) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = {
        "wrong signature": lambda: idp.sign(
            {"aud": idp.audience, "sub": "x", "team": "search"}, key=other
        ),
        "expired": lambda: idp.sign(
            {"aud": idp.audience, "sub": "x", "team": "search", "exp": 1_000_000_000}
        ),
        "unknown team": lambda: idp.access_token(team="nope"),
        "wrong audience": lambda: idp.sign({"aud": "someone-else", "sub": "x", "team": "search"}),
        "no team": lambda: idp.access_token(),
    }[case]()
    assert await _chat(console, token) == 401


@pytest.mark.slow
async def test_single_sign_on_in_the_browser(
    console: Console, idp: LocalIdP, fake: FakeUpstream
) -> None:
    """Through the provider in Chromium, then a playground chat on the provider's token."""
    from tests.console.browser import (
        accessibility_violations,
        browser_page,
        chromium_path,
        new_page,
        screenshot,
    )
    from tests.fakes import Reply

    chromium_path()
    idp.user = {"sub": "u-9", "email": "cy@example.com", "groups": ["search-admins"],
                "team": "search"}  # fmt: skip
    fake.queue(Reply(content="Signed in through the identity provider", chunk_delay=0.05))
    async with browser_page() as browser:
        page = await new_page(browser)
        await page.goto(console.url + "/ui/login")
        await screenshot(page, "login-sso")
        assert await accessibility_violations(page) == []
        await page.get_by_role("link", name="Sign in with single sign-on").click()
        await page.wait_for_url("**/ui/overview")
        assert "cy@example.com (team_admin" in await page.locator("header").inner_text()
        await page.goto(console.url + "/ui/playground")
        await page.get_by_label("Alias").select_option("tiny")
        await page.get_by_label("Message").fill("hello")
        await page.get_by_role("button", name="Send").click()
        await page.wait_for_function(
            "document.getElementById('chat-status').textContent.startsWith('Done')"
        )
        assert await page.locator("#reply").inner_text() == (
            "Signed in through the identity provider"
        )


def test_the_sealed_sign_in_opens_only_with_its_state_and_before_it_expires() -> None:
    from fleetgate.console.oidc import _Pending, open_pending, seal_pending

    live = _Pending("verifier", "nonce", "/ui/spend", "http://gw/ui/oidc/callback", 4e9)
    cookie = seal_pending("state-1", live)
    assert open_pending("state-1", cookie) == live
    assert "verifier" not in cookie and "nonce" not in cookie  # sealed, not just encoded
    assert open_pending("state-2", cookie) is None  # another sign-in's state
    assert open_pending("state-1", cookie[:-4] + "AAAA") is None  # tampered
    assert open_pending("state-1", "not base64 at all!") is None
    assert open_pending("state-1", None) is None
    stale = _Pending("verifier", "nonce", None, "http://gw/ui/oidc/callback", 1.0)
    assert open_pending("state-1", seal_pending("state-1", stale)) is None  # expired


async def test_sign_in_and_bearers_go_out_on_the_owners_one_session(
    console: Console, idp: LocalIdP, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_by: list[str] = []
    init = aiohttp.ClientSession.__init__

    def counted(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        opened_by.append(sys._getframe(1).f_globals.get("__name__", ""))
        init(self, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", counted)
    idp.user = {"sub": "u-9", "email": "cy@example.com", "groups": ["platform"]}
    session, resp = await sso_sign_in(console)  # discovery, JWKS and the code exchange
    async with session:
        assert resp.status == 200 and resp.url.path == "/ui/overview"
    assert await _chat(console, idp.access_token(team="ads", sub="svc")) == 200
    # the gateway's own calls opened no session beside the resource owner's
    assert [m for m in opened_by if m.startswith("fleetgate.")] in (
        [],
        ["fleetgate.resources.outbound"],
    )
    assert console.gw.resources.http.sessions_opened == 1
