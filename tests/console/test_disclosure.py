"""The console shows each alias's registered model name and filing number (issue #38): on the
models page per alias (from the disclosure feature's port, so a reload shows at once) and in the
playground under an answer (the answer's own headers, relayed); nothing when the feature is off;
values escaped as text."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

import pytest
from markupsafe import escape

from fleetgate.config.schema import GatewayConfig
from fleetgate.disclosure.feature import MODEL_HEADER, NUMBER_HEADER
from tests.console.support import MASTER, Console, console_config, csrf_of, running_console
from tests.fakes import FakeUpstream

ZH_NAME = "Acme 中文助手"
ZH_NUMBER = "网信算备110108000000000000001号"
INJECTED = '<script>alert("x")</script>'


def _config(upstream: str, **disclosure: Any) -> GatewayConfig:
    base = console_config(upstream).model_dump(mode="json", exclude_unset=True)
    if disclosure:
        base["disclosure"] = disclosure
    return GatewayConfig.model_validate(base)


def _section(page: str, alias: str) -> str:
    """The models page's card of ``alias`` (its HTML up to the next card)."""
    cards = re.findall(r"<section class=\"card\".*?</section>", page, re.S)
    mine = [c for c in cards if re.search(rf"<h2 id=\"alias-\d+\">{alias}</h2>", c)]
    assert len(mine) == 1, f"no card of {alias}"
    return mine[0]


async def _page(c: Console, path: str) -> str:
    async with await c.signed_in(MASTER) as s, s.get(c.url + path) as resp:
        assert resp.status == 200
        return await resp.text()


async def _chat(c: Console) -> tuple[dict[str, str], str]:
    """A playground chat with ``tiny``: the response's headers and the page it came from."""
    async with await c.signed_in(MASTER) as s:
        async with s.get(c.url + "/ui/playground") as resp:
            page = await resp.text()
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        async with s.post(c.url + "/ui/playground/chat", json=body,
                          headers={"X-CSRF-Token": csrf_of(page)}) as resp:  # fmt: skip
            assert resp.status == 200
            assert "[DONE]" in await resp.text()
            return dict(resp.headers), page


def _decoded(value: str) -> str:
    return unquote(value.removeprefix("UTF-8''"))


async def test_with_disclosure_off_the_console_shows_none(
    fake: FakeUpstream, tmp_path: Any
) -> None:
    async with running_console(fake.url, tmp_path, config=_config(fake.url)) as c:
        page = await _page(c, "/ui/models")
        assert '<h2 id="alias-1">other</h2>' in page  # the page itself is there
        assert "Registered model" not in page and "Filing number" not in page
        headers, playground = await _chat(c)
    assert MODEL_HEADER not in headers and NUMBER_HEADER not in headers
    assert '<p id="disclosure" class="disclosure muted" hidden></p>' in playground


async def test_a_section_switched_off_shows_none(fake: FakeUpstream, tmp_path: Any) -> None:
    config = _config(fake.url, enabled=False, model_name="Acme", filing_number="F-1")
    async with running_console(fake.url, tmp_path, config=config) as c:
        page = await _page(c, "/ui/models")
        headers, _ = await _chat(c)
    assert "Acme" not in page and "F-1" not in page
    assert MODEL_HEADER not in headers


async def test_each_alias_shows_its_own_and_a_reload_shows_at_once(
    fake: FakeUpstream, tmp_path: Any
) -> None:
    other = {"model_name": ZH_NAME, "filing_number": ZH_NUMBER}
    section = {"model_name": "Acme Assistant", "filing_number": "Beijing-Acme-20240101",
               "aliases": {"other": other}}  # fmt: skip
    async with running_console(fake.url, tmp_path, config=_config(fake.url, **section)) as c:
        page = await _page(c, "/ui/models")
        tiny, other = _section(page, "tiny"), _section(page, "other")
        assert "Registered model: <strong>Acme Assistant</strong>" in tiny
        assert "Filing number: <strong>Beijing-Acme-20240101</strong>" in tiny
        assert f"Registered model: <strong>{ZH_NAME}</strong>" in other
        assert f"Filing number: <strong>{ZH_NUMBER}</strong>" in other
        assert "Acme Assistant" not in other and ZH_NUMBER not in tiny
        # the playground passes on the answer's own name and number
        headers, _ = await _chat(c)
        assert headers[MODEL_HEADER] == "Acme Assistant"
        assert headers[NUMBER_HEADER] == "Beijing-Acme-20240101"

        # a reload: a new number for tiny, other's name dropped (the default shows instead)
        new = {"filing_number": "Beijing-Acme-20250202", "model_name": "Acme Assistant",
               "aliases": {"other": {"filing_number": ZH_NUMBER}}}  # fmt: skip
        tables = c.gw.tables
        tables.apply(_config(fake.url, **new))
        assert not tables.change.restart_required, tables.change
        page = await _page(c, "/ui/models")
        tiny, other = _section(page, "tiny"), _section(page, "other")
        assert "Beijing-Acme-20250202" in tiny and "Beijing-Acme-20240101" not in page
        assert "Registered model: <strong>Acme Assistant</strong>" in other
        assert ZH_NAME not in page and ZH_NUMBER in other
        headers, _ = await _chat(c)
        assert headers[NUMBER_HEADER] == "Beijing-Acme-20250202"


async def test_chinese_values_reach_the_playground_encoded(
    fake: FakeUpstream, tmp_path: Any
) -> None:
    config = _config(fake.url, model_name=ZH_NAME, filing_number=ZH_NUMBER)
    async with running_console(fake.url, tmp_path, config=config) as c:
        headers, _ = await _chat(c)
    assert headers[NUMBER_HEADER].isascii()  # RFC 8187, as the page's script decodes it
    assert _decoded(headers[MODEL_HEADER]) == ZH_NAME
    assert _decoded(headers[NUMBER_HEADER]) == ZH_NUMBER


async def test_values_are_shown_as_text_never_as_markup(fake: FakeUpstream, tmp_path: Any) -> None:
    config = _config(fake.url, model_name="A & B <i>", filing_number=INJECTED)
    async with running_console(fake.url, tmp_path, config=config) as c:
        page = await _page(c, "/ui/models")
        headers, _ = await _chat(c)
    assert INJECTED not in page and "<i>" not in page
    assert f"Filing number: <strong>{escape(INJECTED)}</strong>" in _section(page, "tiny")
    assert "Registered model: <strong>A &amp; B &lt;i&gt;</strong>" in page
    # the playground gets the text as it is (printable ASCII: not encoded); its script writes it
    # with textContent, never as markup
    assert headers[NUMBER_HEADER] == INJECTED


@pytest.mark.slow
async def test_the_playground_shows_them_under_the_answer_in_a_browser(
    fake: FakeUpstream, tmp_path: Any
) -> None:
    """Chromium: the page's script decodes the answer's headers and writes them as text."""
    from tests.console.browser import accessibility_violations, browser_page, new_page
    from tests.console.test_browser import sign_in

    config = _config(fake.url, model_name=ZH_NAME, filing_number=INJECTED)
    async with running_console(fake.url, tmp_path, config=config) as c, browser_page() as b:
        page = await new_page(b)
        await sign_in(page, c.url, MASTER)
        await page.goto(c.url + "/ui/playground")
        assert not await page.locator("#disclosure").is_visible()  # before an answer: none
        await page.get_by_label("Alias").select_option("tiny")
        await page.get_by_label("Message").fill("hi")
        await page.get_by_role("button", name="Send").click()
        await page.wait_for_function(
            "document.getElementById('chat-status').textContent.startsWith('Done')"
        )
        shown = page.locator("#disclosure")
        assert await shown.is_visible()
        assert (
            await shown.inner_text() == f"Registered model: {ZH_NAME} · Filing number: {INJECTED}"
        )
        assert await page.locator("#disclosure *").count() == 0  # text only, no element made
        assert await accessibility_violations(page) == []
        await page.get_by_role("button", name="New conversation").click()
        assert not await shown.is_visible()
