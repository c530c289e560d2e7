"""Console sessions in the database: shared by every replica (one sign-in, any replica; one
sign-out, every replica), expiring, bounded, and of no use to someone who reads the table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import select
from yarl import URL

from fleetgate.app import MIGRATIONS
from fleetgate.console.sessions import COOKIE, Sessions, SessionsFull
from fleetgate.console.tables import console_sessions
from fleetgate.contract.principal import Principal
from fleetgate.store import Database
from tests.console.support import MASTER, csrf_of, running_console
from tests.fakes import FakeUpstream


@pytest.fixture
async def db(db_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated store (SQLite or PostgreSQL, as ``db_url``)."""
    database = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await database.migrate()
        yield database
    finally:
        await database.aclose()


async def test_two_replicas_share_a_session_and_a_sign_out_ends_it_on_both(
    fake: FakeUpstream, db_url: str, tmp_path: Path
) -> None:
    url = db_url if db_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'shared.db'}"
    async with (
        running_console(fake.url, tmp_path / "a", database_url=url) as a,
        running_console(fake.url, tmp_path / "b", database_url=url) as b,
    ):
        browser = await a.signed_in(MASTER)  # signed in on replica A
        try:
            cookie = browser.cookie_jar.filter_cookies(URL(a.url))[COOKIE].value
            jar = aiohttp.CookieJar(unsafe=True)
            jar.update_cookies({COOKIE: cookie}, response_url=URL(b.url))
            async with aiohttp.ClientSession(cookie_jar=jar) as other:  # ... moved to B
                async with other.get(b.url + "/ui/teams", allow_redirects=False) as resp:
                    assert resp.status == 200, resp.headers.get("Location")
                    csrf = csrf_of(await resp.text())
                # B accepts the session's CSRF token for a change, and refuses a wrong one
                form = {"name": "ads", "csrf": csrf}
                async with other.post(b.url + "/ui/teams", data=form) as resp:
                    assert resp.status == 200 and "ads" in await resp.text()
                bad = {"name": "x", "csrf": "forged"}
                async with other.post(b.url + "/ui/teams", data=bad) as resp:
                    assert resp.status == 403
                # signing out on B ends the session on A too
                async with other.post(
                    b.url + "/ui/logout", data={"csrf": csrf}, allow_redirects=False
                ) as resp:
                    assert resp.status == 302
            async with browser.get(a.url + "/ui/teams", allow_redirects=False) as resp:
                assert resp.status == 302 and resp.headers["Location"].startswith("/ui/login")
            assert await a.open_sessions() == 0 and await b.open_sessions() == 0
        finally:
            await browser.close()


async def test_sessions_expire_and_the_oldest_go_first_past_the_limit(db: Database) -> None:
    now = [1000.0]
    sessions = Sessions(db, ttl_s=10, limit=2, clock=lambda: now[0])
    a = await sessions.open(Principal("k"), "t", "key", "n")
    now[0] += 1
    b = await sessions.open(Principal("k"), "t", "key", "n")
    assert a.id != b.id and a.csrf != b.csrf
    now[0] += 1
    c = await sessions.open(Principal("k"), "t", "key", "n")
    assert await sessions.get(a.id) is None
    assert (await sessions.get(b.id) or a).id == b.id and await sessions.get(c.id) is not None
    now[0] = 1011.0  # b's ten seconds are over, not c's
    assert await sessions.get(b.id) is None and await sessions.count() == 1
    assert await sessions.get("nonsense") is None and await sessions.get(None) is None


async def test_the_table_holds_neither_the_session_id_nor_the_credential(db: Database) -> None:
    """A copy of the table opens nothing: the id is stored hashed and the key sealed with a
    key derived from the id; an OIDC session's principal comes back whole."""
    sessions = Sessions(db, ttl_s=60, limit=10)
    principal = Principal(
        "oidc:alice", role="team_admin", team_id="team_1", user_id="alice",
        allowed_aliases=frozenset({"tiny"}), tags=(("env", "prod"),),
    )  # fmt: skip
    secret = "sk-very-secret-access-token"
    opened = await sessions.open(principal, secret, "oidc", "alice@example.com")
    async with db.engine.connect() as conn:
        row = (await conn.execute(select(console_sessions))).one()
    dump = repr(tuple(row))
    assert opened.id not in dump and secret not in dump
    assert secret.encode() not in bytes(row.sealed_token)
    again = await sessions.get(opened.id)
    assert again is not None
    assert (again.principal, again.token, again.via, again.csrf) == (
        principal,
        secret,
        "oidc",
        opened.csrf,
    )
    # the row under another id (a guessed or swapped cookie) cannot be unsealed
    assert await sessions.get(opened.id[:-1] + ("A" if opened.id[-1] != "A" else "B")) is None


async def test_one_key_signing_in_again_and_again_ends_only_its_own_sessions(db: Database) -> None:
    """Finding 6 of #31: sessions used to be evicted globally, oldest first, so one key
    signing in ``limit`` times signed the master out."""
    now = [1000.0]
    sessions = Sessions(db, ttl_s=600, limit=5, per_principal=2, clock=lambda: now[0])
    master = await sessions.open(Principal("master", role="master"), "m", "key", "master")
    opened = []
    for _ in range(12):
        now[0] += 1
        opened.append(await sessions.open(Principal("k1"), "t", "key", "k1"))
    assert await sessions.get(master.id) is not None
    # the key keeps its two newest sessions, the older ones are its own that ended
    alive = [s for s in opened if await sessions.get(s.id) is not None]
    assert [s.id for s in alive] == [s.id for s in opened[-2:]]


async def test_a_full_console_ends_the_biggest_holders_session_or_refuses_the_sign_in(
    db: Database,
) -> None:
    """Past ``limit`` the principal holding the most sessions gives one up; when everyone holds
    one, the new sign-in is refused and no one's only session ends."""
    now = [1000.0]
    sessions = Sessions(db, ttl_s=600, limit=3, per_principal=5, clock=lambda: now[0])
    master = await sessions.open(Principal("master", role="master"), "m", "key", "master")
    now[0] += 1
    k1_old = await sessions.open(Principal("k1"), "t", "key", "k1")
    now[0] += 1
    k1_new = await sessions.open(Principal("k1"), "t", "key", "k1")
    now[0] += 1
    k2 = await sessions.open(Principal("k2"), "t", "key", "k2")  # full: k1 gives one up
    assert await sessions.get(k1_old.id) is None
    for kept in (master, k1_new, k2):
        assert await sessions.get(kept.id) is not None
    now[0] += 1
    with pytest.raises(SessionsFull) as refused:  # everyone holds one: no one is ended
        await sessions.open(Principal("k3"), "t", "key", "k3")
    assert refused.value.status == 503 and refused.value.code == "console_sessions_full"
    for kept in (master, k1_new, k2):
        assert await sessions.get(kept.id) is not None
    assert await sessions.count() == 3


async def test_signing_in_with_a_key_many_times_leaves_the_masters_browser_signed_in(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    async with running_console(
        fake.url, tmp_path, max_sessions=4, max_sessions_per_principal=2
    ) as console:
        _, key = await console.team_and_key("search")
        master = await console.signed_in(MASTER)
        try:
            for _ in range(6):
                await (await console.signed_in(key["key"])).close()
            async with master.get(console.url + "/ui/teams", allow_redirects=False) as resp:
                assert resp.status == 200, resp.headers.get("Location")
            assert await console.open_sessions() == 3  # the master's and the key's two newest
        finally:
            await master.close()
