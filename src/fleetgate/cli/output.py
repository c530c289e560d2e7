"""How the planning commands (``plan``, ``plan pd``, ``plan forecast``) print their result."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

__all__ = ["print_result"]


def print_result(
    result: Any, table: Callable[[], str], json_path: Path | None, *, numpy: bool = False
) -> bool:
    """``--json -``: ``result`` as indented JSON on stdout, alone. Otherwise ``table()`` on
    stdout, and the JSON written to ``json_path`` when one is named. Whether the table was
    printed (False: stdout holds the JSON and nothing more may be printed). ``numpy``: the
    result holds numpy values (``orjson.OPT_SERIALIZE_NUMPY``)."""
    option = orjson.OPT_INDENT_2 | (orjson.OPT_SERIALIZE_NUMPY if numpy else 0)
    if json_path and str(json_path) == "-":
        sys.stdout.write(orjson.dumps(result, option=option).decode() + "\n")
        return False
    print(table())
    if json_path:
        json_path.write_bytes(orjson.dumps(result, option=option))
    return True
