"""tests/ordering.py: the workers' file order, slowest first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.ordering import slowest_first


@dataclass
class _Item:
    nodeid: str


def _ids(items: list[Any]) -> list[str]:
    return [i.nodeid for i in items]


def test_files_are_taken_slowest_first_and_keep_their_tests_in_order() -> None:
    items = [_Item(n) for n in ("tests/a/test_x.py::t1", "tests/b/test_y.py::t1",
                                "tests/a/test_x.py::t2", "tests/c/test_z.py::t1",
                                "tests/b/test_y.py::t2")]  # fmt: skip
    measured = {"tests/a/test_x.py": 3.0, "tests/b/test_y.py": 40.0, "tests/c/test_z.py": 7.5}
    ordered = slowest_first(cast(list[pytest.Item], items), measured)
    assert _ids(ordered) == ["tests/b/test_y.py::t1", "tests/b/test_y.py::t2",
                             "tests/c/test_z.py::t1", "tests/a/test_x.py::t1",
                             "tests/a/test_x.py::t2"]  # fmt: skip


def test_a_file_not_measured_counts_a_second_per_test_and_ties_keep_collection_order() -> None:
    items = [_Item(n) for n in ("tests/new/test_n.py::a", "tests/new/test_n.py::b",
                                "tests/new/test_n.py::c", "tests/old/test_o.py::a",
                                "tests/m/test_m.py::a")]  # fmt: skip
    measured = {"tests/old/test_o.py": 2.0, "tests/m/test_m.py": 3.0}
    ordered = slowest_first(cast(list[pytest.Item], items), measured)
    assert _ids(ordered)[:3] == [
        "tests/new/test_n.py::a",
        "tests/new/test_n.py::b",
        "tests/new/test_n.py::c",
    ]  # 3 tests unmeasured: 3.0 s, first seen
    assert _ids(ordered)[3:] == ["tests/m/test_m.py::a", "tests/old/test_o.py::a"]
