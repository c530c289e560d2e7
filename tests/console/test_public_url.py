"""The session cookie's Secure flag and the OIDC redirect URI come from configuration
(``extensions.console.public_url``), never from the Host header a client sends (finding 12 of
#31)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from fleetgate.console.config import console_config
from fleetgate.console.sessions import LOGIN_COOKIE
from fleetgate.errors import ConfigError
from tests.console.idp import running_idp
from tests.console.support import Console, running_console
from tests.fakes import FakeUpstream


async def _login_cookie_secure(c: Console, host: str) -> bool:
    async with c.http.get(c.url + "/ui/login", headers={"Host": host}) as resp:
        assert resp.status == 200
        return bool(resp.cookies[LOGIN_COOKIE]["secure"])


async def test_the_secure_flag_follows_public_url_whatever_the_host_header(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    async with running_console(fake.url, tmp_path / "a", public_url="https://gw.example.com") as c:
        assert await _login_cookie_secure(c, "127.0.0.1") is True
        assert await _login_cookie_secure(c, "localhost:8080") is True
    async with running_console(fake.url, tmp_path / "b", public_url="http://127.0.0.1:4000") as c:
        assert await _login_cookie_secure(c, "gw.example.com") is False


async def test_without_public_url_a_host_header_cannot_turn_secure_off_on_a_public_socket(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """On the loopback socket tests listen on, a loopback Host is a developer's machine (not
    Secure) and any other name is Secure; ``secure_cookie: true`` forces it."""
    async with running_console(fake.url, tmp_path / "a") as c:
        assert await _login_cookie_secure(c, "127.0.0.1") is False
        assert await _login_cookie_secure(c, "gw.example.com") is True
    async with running_console(fake.url, tmp_path / "b", secure_cookie=True) as c:
        assert await _login_cookie_secure(c, "127.0.0.1") is True


async def test_the_oidc_redirect_uri_is_the_configured_one_not_the_host_header(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    async with running_idp() as idp:
        oidc = {"issuer": idp.url, "client_id": idp.client_id, "roles": {"p": "master"}}
        public = "https://gw.example.com/"
        async with running_console(fake.url, tmp_path, public_url=public, oidc=oidc) as c:
            async with c.http.get(
                c.url + "/ui/oidc/start", headers={"Host": "evil.example"}, allow_redirects=False
            ) as resp:
                assert resp.status == 302
                query = parse_qs(urlsplit(resp.headers["Location"]).query)
                secure = resp.cookies["fg_oidc_state"]["secure"]
    assert query["redirect_uri"] == ["https://gw.example.com/ui/oidc/callback"]
    assert secure  # public_url is https


@pytest.mark.parametrize(
    "public_url",
    ["gw.example.com", "javascript:alert(1)", "https://user:pw@gw.example.com",
     "https://gw.example.com/?next=x", "https://gw.example.com/#x", "ftp://gw.example.com",
     "https://gw.example.com:99999", "https://gw\x00.example.com", "https://"],
)  # fmt: skip
def test_public_url_must_be_a_plain_http_url(public_url: str) -> None:
    with pytest.raises(ConfigError, match="public_url"):
        console_config({"console": {"public_url": public_url}})


def test_single_sign_on_needs_public_url() -> None:
    oidc = {"issuer": "https://idp.example.com", "client_id": "fleetgate"}
    with pytest.raises(ConfigError, match="public_url"):
        console_config({"console": {"oidc": oidc}})
    cfg = console_config({"console": {"oidc": oidc, "public_url": "https://gw.example.com/x/"}})
    assert cfg.public_url == "https://gw.example.com/x"
