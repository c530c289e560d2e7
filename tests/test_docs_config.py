"""The feature pages document every field of their config sections, with its default.

Each section has a heading ``### `name:` `` in its page, followed by a table whose rows start
with the field's path inside the section in backticks (``images.fetch.max_bytes``; a key of a
mapping is written ``<alias>``: ``prompts.<alias>.system_prompt``) and whose second column is
the default. A field added, renamed or given a new default without its row fails here.

docs/config-reference.md, every field of every section, is generated
(``fleetgate config reference --output docs/config-reference.md``) and must be current.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fleetgate.api.responses.config import ResponsesConfig
from fleetgate.app import SECTIONS as APP_SECTIONS
from fleetgate.batches.config import BatchesConfig
from fleetgate.cache.config import CacheConfig
from fleetgate.cli.reference import REGENERATE, render
from fleetgate.cli.reference import sections as reference_sections
from fleetgate.config.schema import GatewayConfig, HealthConfig, RouterConfig, RoutingConfig
from fleetgate.mcp.config import McpConfig
from fleetgate.multimodal.config import MultimodalConfig
from fleetgate.releases.config import ReleasesConfig
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.scheduling.config import SchedulingConfig

ROOT = Path(__file__).resolve().parents[1]

SECTIONS: list[tuple[str, str, type[BaseModel]]] = [
    ("docs/multimodal.md", "multimodal", MultimodalConfig),
    ("docs/routing.md", "routing", RoutingConfig),
    ("docs/routing.md", "router", RouterConfig),
    ("docs/routing.md", "health", HealthConfig),
    ("docs/routing.md", "semantic", SemanticConfig),
    ("docs/scheduling.md", "scheduling", SchedulingConfig),
    ("docs/releases.md", "releases", ReleasesConfig),
    ("docs/scheduling.md", "batches", BatchesConfig),
    ("docs/cache.md", "cache", CacheConfig),
    ("docs/mcp.md", "mcp", McpConfig),
    ("docs/responses.md", "responses", ResponsesConfig),
]


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether under mapping keys) or (None, False) for a leaf."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _model_in(args[0]) if len(args) == 1 else (None, False)
    if origin is dict:
        value = typing.get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, True
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, default) of every leaf field; a mapping of models is a leaf and a branch."""
    for name, field in model.model_fields.items():
        path = prefix + name
        inner, keyed = _model_in(field.annotation)
        if inner is not None and not keyed:
            yield from leaves(inner, path + ".")
            continue
        if field.is_required():
            default: Any = PydanticUndefined
        else:
            default = field.get_default(call_default_factory=True)
        yield path, default
        if inner is not None:
            yield from leaves(inner, path + ".<key>.")


def expected_defaults(value: Any) -> list[str]:
    """Spellings of ``value`` one of which the default cell must contain (all, for a list)."""
    if value is PydanticUndefined:
        return ["required"]
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, int):
        return [str(value), f"{value:,}"]
    if isinstance(value, float):
        return [f"{value:g}", str(value)]
    if isinstance(value, str):
        return [value.lower()]
    if isinstance(value, tuple | list | dict) and not value:
        return ["{}" if isinstance(value, dict) else "[]"]
    raise AssertionError(f"no rule for a default like {value!r}")


def mentions(cell: str, spelling: str) -> bool:
    """``spelling`` in ``cell`` as a whole word: ``200`` is not in ``2000``, ``0.2`` not in
    ``0.25``."""
    pattern = rf"(?<![\w.]){re.escape(spelling)}(?![\w.])"
    return re.search(pattern, cell.lower()) is not None


def section_text(page: str, section: str) -> str:
    """The text under ``### `section:` `` up to the next heading of that level or above."""
    match = re.search(rf"^### `{section}:`.*$", page, flags=re.MULTILINE)
    assert match is not None, f"no heading ### `{section}:`"
    rest = page[match.end() :]
    end = re.search(r"^#{1,3} ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def rows(text: str) -> dict[str, tuple[str, str]]:
    """Table rows by their first cell's backticked path (mapping keys as ``<key>``)."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.fullmatch(r"`[^`]+`", cells[0]):
            continue
        path = re.sub(r"<[^>.]+>", "<key>", cells[0].strip("`"))
        out[path] = (cells[1], cells[2])
    return out


@pytest.mark.parametrize(("page", "section", "model"), SECTIONS, ids=[s[1] for s in SECTIONS])
def test_every_field_is_documented_with_its_default(
    page: str, section: str, model: type[BaseModel]
) -> None:
    table = rows(section_text((ROOT / page).read_text(), section))
    missing = [path for path, _ in leaves(model) if path not in table]
    assert not missing, f"{page}, `{section}:` has no row for: {', '.join(missing)}"
    for path, default in leaves(model):
        cell, meaning = table[path]
        assert meaning, f"{page}: `{section}.{path}` has no meaning"
        if isinstance(default, tuple | list) and default:
            want = [str(v).lower() for v in default]
            assert all(mentions(cell, w) for w in want), f"{section}.{path}: {cell!r} != {default}"
        else:
            spellings = expected_defaults(default)
            assert any(mentions(cell, s) for s in spellings), (
                f"{page}: default of `{section}.{path}` is {cell!r}, expected {spellings[0]!r}"
            )


@pytest.mark.parametrize("page", sorted({s[0] for s in SECTIONS}))
def test_the_page_is_linked_from_the_readme(page: str) -> None:
    assert f"]({page})" in (ROOT / "README.md").read_text()


def test_no_row_documents_a_field_that_does_not_exist() -> None:
    # the check above in reverse: a row documenting a field the model does not have
    for page, section, model in SECTIONS:
        known = {path for path, _ in leaves(model)}
        table = rows(section_text((ROOT / page).read_text(), section))
        stale = sorted(set(table) - known)
        assert not stale, f"{page}, `{section}:` documents fields that do not exist: {stale}"


def test_the_configuration_reference_is_current() -> None:
    """docs/config-reference.md is rendered from the config models; a field added, renamed,
    retyped, given a new default or a new description without regenerating it fails here."""
    text = (ROOT / "docs/config-reference.md").read_text(encoding="utf-8")
    assert text == render(), f"docs/config-reference.md is stale: run `{REGENERATE}`"


def test_every_field_of_the_reference_says_what_it_is_for() -> None:
    bare = [
        path for _, _, rows in reference_sections() for path, *_, meaning in rows if not meaning
    ]
    assert not bare, f"fields with no description or comment in their model: {bare}"


def test_the_reference_covers_every_section() -> None:
    text = render()
    names = [*GatewayConfig.model_fields, *(d.name for d in APP_SECTIONS)]
    for name in names:
        if name in ("sections", "extensions", "cache"):
            continue
        assert f"## `{name}`" in text, name
    assert "`models[].cache.exact`" in text and "## `console`" in text
    assert "](config-reference.md)" in (ROOT / "docs/configuration.md").read_text()
