"""No module over 400 lines unless its docstring says why (issue #32).

A module past ~400 lines usually holds two jobs a reader wants apart; when it does not (one
state machine whose steps share private state, one declarative schema read top to bottom), its
opening docstring has a paragraph beginning "Why one module:" that says so for that module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = (ROOT / "src" / "fleetgate", ROOT / "training" / "src")
LIMIT = 400
REASON = "Why one module:"


def long_modules() -> list[tuple[Path, int]]:
    """Every ``.py`` module of the trees (outside node_modules) with more than `LIMIT` lines."""
    found = []
    for tree in TREES:
        for path in sorted(tree.rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            lines = path.read_text(encoding="utf-8").count("\n")  # as ``wc -l`` counts
            if lines > LIMIT:
                found.append((path, lines))
    return found


def test_the_trees_are_found() -> None:
    assert (ROOT / "src" / "fleetgate" / "app.py").is_file()
    assert long_modules(), "no module over the limit at all: is the line count right?"


def test_long_modules_say_why() -> None:
    offenders = []
    for path, lines in long_modules():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if REASON not in doc:
            offenders.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not offenders, (
        f"modules over {LIMIT} lines whose docstring has no {REASON!r} paragraph (split them, "
        "or say why they are one module): " + ", ".join(offenders)
    )
