"""Headless Chromium for the console tests: Debian's ``chromium`` driven by Playwright (no
browser download), axe-core from the console's npm packages, screenshots into docs/console/."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "console"
AXE = ROOT / "src" / "fleetgate" / "console" / "node_modules" / "axe-core" / "axe.min.js"


def chromium_path() -> str:
    """Debian's chromium; the browser tests skip (saying why) where it or Playwright is not."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    pytest.importorskip("playwright.async_api", reason="playwright is not installed (dev extra)")
    if not AXE.is_file():
        pytest.skip("the console's npm packages are not installed (make, or npm ci)")
    return path


@asynccontextmanager
async def browser_page() -> AsyncIterator[Any]:
    """A fresh page in a fresh context (its own cookies) of a headless Chromium."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            await browser.close()


async def new_page(browser: Any) -> Any:
    # bypass_csp: the accessibility check injects axe-core, which the console's CSP refuses
    context = await browser.new_context(viewport={"width": 1280, "height": 860}, bypass_csp=True)
    page = await context.new_page()
    page.set_default_timeout(10_000)
    return page


async def screenshot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def accessibility_violations(page: Any) -> list[str]:
    """axe-core's WCAG 2 A/AA violations on the page (labels, contrast, names, ...)."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.add_script_tag(path=str(AXE))
    result = await page.evaluate(
        "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}})"
    )
    return [
        f"{v['id']}: {v['help']} ({', '.join(n['target'][0] for n in v['nodes'][:3])})"
        for v in result["violations"]
    ]


async def tab_order(page: Any, presses: int) -> list[str]:
    """What keyboard focus lands on, pressing Tab ``presses`` times from the top."""
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    seen = []
    for _ in range(presses):
        await page.keyboard.press("Tab")
        seen.append(
            await page.evaluate(
                "(() => { const e = document.activeElement;"
                " return e.tagName + ':' + (e.getAttribute('href') || e.id || e.name"
                " || e.textContent.trim()); })()"
            )
        )
    return seen
