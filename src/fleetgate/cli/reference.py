"""``fleetgate config reference``: docs/config-reference.md, rendered from the config models.

One row per field of every section: the ground floor (`fleetgate.config.schema`), each
feature's declared section (`fleetgate.app.SECTIONS`) and the plug-in features' ``extensions``.
A row is the field's path, its type, its default and one line of meaning: the field's
``description``, else the ``#`` comment on or just above its line in the model's source.
``tests/test_docs_config.py`` renders it again and fails when the file is stale.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from fleetgate.app import SECTIONS
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import AliasSection, OptionalSection

__all__ = ["REGENERATE", "render", "run_reference"]

REGENERATE = "fleetgate config reference --output docs/config-reference.md"

EXTENSIONS: tuple[tuple[str, type[BaseModel]], ...] = ()
"""Plug-in features' sections under ``extensions`` documented here (the built-in features
declare their own top-level sections: `fleetgate.app.SECTIONS`)."""

_HEAD = f"""# Configuration reference

Generated from the config models by `{REGENERATE}`; do not edit by hand
(`tests/test_docs_config.py` fails when it is stale). How the file is read, and what each
section is for: [configuration.md](configuration.md).

`[]` after a name: each item of a list; `<key>`: each key of a mapping. A section marked
*optional* is off when absent; every other section applies its defaults when absent.
"""


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """(the model a field holds, how: "" direct, "[]" list items, ".<key>" mapping values)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _model_in(args[0]) if len(args) == 1 else (None, "")
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        inner, _ = _model_in(args[0]) if len(args) == 1 else (None, "")
        return inner, "[]"
    if origin is dict:
        inner, _ = _model_in(typing.get_args(annotation)[1])
        return inner, ".<key>"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    return None, ""


def _type(annotation: Any) -> str:
    """``int \\| None``, ``Literal['a', 'b']``, ``dict[str, PolicyConfig]`` (escaped for tables)."""
    return _spell(annotation).replace("|", "\\|")


def _spell(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # HttpUrl: the type a reader writes, not its validators
        return _spell(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_spell(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else _spell(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", str(annotation).replace("typing.", ""))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section defaults)"
    if isinstance(value, bool) or value is None:
        return {True: "`true`", False: "`false`", None: "none"}[value]
    text = json.dumps(to_jsonable_python(value), ensure_ascii=False)
    return f"`{text}`".replace("|", "\\|")


@cache
def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's own words in the class source: its attribute docstring, the ``#`` comment
    block just above it, or the comment on its line."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        out[node.target.id] = _docstring(after) or _comment(lines, node.lineno - 1)
    return out


def _docstring(node: ast.stmt | None) -> str:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return str(node.value.value) if isinstance(node.value.value, str) else ""
    return ""


def _comment(lines: list[str], index: int) -> str:
    above: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        above.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    inline = lines[index].split("  # ", 1)[1] if "  # " in lines[index] else ""
    return " ".join(above) or inline.strip()


def _meaning(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    owner = next(
        (c for c in model.__mro__ if name in getattr(c, "__annotations__", {})), model
    )  # the class that declares it (a shared base's field is commented there)
    text = field.description or _comments(owner).get(name, "")
    return " ".join(text.split()).replace("|", "\\|")


def fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    """(path, type, default, meaning) of every field of ``model``, nested ones after theirs."""
    for name, field in model.model_fields.items():
        if name == "sections":
            continue
        path = prefix + name
        inner, how = _model_in(field.annotation)
        yield path, _type(field.annotation), _default(field), _meaning(model, name, field)
        if inner is not None:
            yield from fields(inner, f"{path}{how}.")


def _table(title: str, note: str, rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["", f"## {title}", ""]
    if note:
        out += [note, ""]
    out += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    out += [f"| `{p}` | {t} | {d} | {m or '—'} |" for p, t, d, m in rows]
    return out


def sections() -> Iterator[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """(title, note, rows) of every section, ground floor first."""
    for name, field in GatewayConfig.model_fields.items():
        if name in ("sections", "extensions"):
            continue
        inner, how = _model_in(field.annotation)
        assert inner is not None, name
        rows = list(fields(inner, f"{name}{how}."))
        if name == "models":
            for decl in SECTIONS:
                if isinstance(decl, AliasSection):
                    rows += list(fields(decl.model, f"models[].{decl.name}."))
        yield f"`{name}`", "Ground floor (`fleetgate.config.schema`).", rows
    for decl in SECTIONS:
        if isinstance(decl, AliasSection):
            continue
        kind = "optional: absent, the feature is off" if isinstance(decl, OptionalSection) else ""
        where = f"Declared in `{decl.model.__module__}`" + (f"; {kind}" if kind else "") + "."
        yield f"`{decl.name}`", where, list(fields(decl.model, f"{decl.name}."))
    for name, model in EXTENSIONS:
        where = f"A plug-in feature's section, read by `{model.__module__}`."
        yield f"`extensions.{name}`", where, list(fields(model, f"extensions.{name}."))


def render() -> str:
    """The whole reference, as docs/config-reference.md holds it."""
    out = [_HEAD.rstrip("\n")]
    for title, note, rows in sections():
        out += _table(title, note, rows)
    return "\n".join(out) + "\n"


def count_fields() -> tuple[int, int]:
    """(fields in the reference, those of them with no meaning)."""
    rows = [row for _, _, table in sections() for row in table]
    return len(rows), sum(1 for row in rows if not row[3])


def run_reference(args: argparse.Namespace) -> int:
    text = render()
    if args.output is None:
        print(text, end="")
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    total, bare = count_fields()
    print(f"{args.output}: {total} fields ({bare} without a meaning)")
    return 0
