"""The error tree drawn in ``fleetgate/errors.py``'s docstring is the tree in the code."""

from __future__ import annotations

import re
import textwrap

from fleetgate import errors

_LINE = re.compile(r"^(?P<prefix>(?:[│ ]   |[├└]── )*)(?P<name>[A-Z]\w+)\b")


def _drawn_parents() -> dict[str, str | None]:
    """Each class in the docstring drawing mapped to the class drawn as its parent."""
    paragraphs = [textwrap.dedent(p) for p in (errors.__doc__ or "").split("\n\n")]
    (tree,) = [p for p in paragraphs if p.startswith(errors.FleetgateError.__name__)]
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in tree.splitlines():
        match = _LINE.match(line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["prefix"]) // 4
        path[depth:] = [match["name"]]
        parents[match["name"]] = path[depth - 1] if depth else None
    return parents


def _defined() -> dict[str, type[BaseException]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type)
        and issubclass(cls, BaseException)
        and cls.__module__ == errors.__name__
    }


def test_every_error_class_is_drawn_under_its_base_class() -> None:
    drawn = _drawn_parents()
    defined = _defined()
    assert sorted(drawn) == sorted(defined)
    for name, cls in defined.items():
        base = cls.__bases__[0].__name__
        assert drawn[name] == (None if base == "Exception" else base), name


def test_every_error_class_is_exported() -> None:
    assert sorted(errors.__all__) == sorted(_defined())
