"""The docs split into pages a user reads (current figures first) and a dated results log.

docs/benchmarks.md and docs/safety.md give the current figures and link into docs/results/,
where the bench scripts write their dated sections (issue #35). These tests keep the links
between them resolving and every logged benchmark reachable from the short page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LOG = DOCS / "results" / "benchmarks.md"
SUMMARY = DOCS / "benchmarks.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose(path):
        match = re.match(r"^#{1,6} (.+)$", line)
        if match is None:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[str, str]]:
    """The relative links of a Markdown file as (target path, anchor)."""
    found = []
    for line in _prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            found.append((file, anchor))
    return found


PAGES = [
    ROOT / "README.md",
    SUMMARY,
    DOCS / "safety.md",
    *sorted((DOCS / "results").glob("*.md")),
]
LINKERS = sorted({ROOT / "README.md", *DOCS.glob("*.md"), *(DOCS / "results").glob("*.md")})


def test_slug_matches_githubs_anchors() -> None:
    assert slug("Endpoint picker: Envoy + fleetgate epp") == "endpoint-picker-envoy--fleetgate-epp"
    assert slug("MCP gateway (`bench/mcp/run.py`)") == "mcp-gateway-benchmcprunpy"


@pytest.mark.parametrize("page", LINKERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_into_the_split_pages_resolve(page: Path) -> None:
    """A link to benchmarks.md, safety.md or docs/results/ names a file and heading that exist."""
    for file, anchor in links(page):
        target = (page.parent / file).resolve() if file else page
        if target not in PAGES and target.parent != DOCS / "results":
            continue
        assert target.exists(), f"{page.name}: link to missing {file}"
        if anchor:
            assert anchor in anchors(target), f"{page.name}: no heading #{anchor} in {file}"


def test_every_logged_benchmark_is_in_the_current_figures_table() -> None:
    """Each `## ` section of the results log is linked from the table of docs/benchmarks.md,
    by its own anchor or one of its subsections'."""
    linked = {anchor for file, anchor in links(SUMMARY) if file == "results/benchmarks.md"}
    sections: dict[str, set[str]] = {}
    current = ""
    seen: dict[str, int] = {}
    for line in _prose(LOG):
        match = re.match(r"^(##|###) (.+)$", line)
        if match is None:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchor = base if n == 0 else f"{base}-{n}"
        if match.group(1) == "##":
            current = anchor
            sections[current] = {anchor}
        elif current:
            sections[current].add(anchor)
    assert len(sections) >= 10
    missing = [name for name, own in sections.items() if not own & linked]
    assert not missing, f"log sections without a row in docs/benchmarks.md: {missing}"


def test_the_user_pages_put_current_figures_first_and_stay_short() -> None:
    summary = SUMMARY.read_text(encoding="utf-8")
    assert summary.index("## Current figures") < summary.index("## How to read these figures")
    assert len(summary.splitlines()) < 120
    safety = (DOCS / "safety.md").read_text(encoding="utf-8")
    assert "## Current evaluation figures" in safety
    assert "Results on the blind test sets" not in safety.replace(
        "#results-on-the-blind-test-sets", ""
    )
    log = (DOCS / "results" / "safety-evaluations.md").read_text(encoding="utf-8")
    assert "## Results on the blind test sets (the figures to quote)" in log


def test_bench_scripts_write_into_the_results_log() -> None:
    """No bench script's default docs path is the short page any more."""
    stale = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "bench").rglob("*.py")
        if re.search(r'"docs"\s*/\s*"benchmarks\.md"', path.read_text(encoding="utf-8"))
    ]
    assert not stale, f"bench scripts still writing docs/benchmarks.md: {stale}"
