"""The order in which two test workers take the suite's files: the slowest first.

``make test`` runs ``pytest -n 2 --dist loadfile --no-loadscope-reorder``: each worker takes a
whole file at a time, in the order collected. Left to xdist's own order (most tests first) the
slow files with few tests (rollouts, replicas, multi-process fleets) came last and one worker
ran them alone for minutes while the other sat idle. Here each worker sorts the collected items
by their file's seconds in ``tests/durations.json`` (measured on a whole run; files not listed
count one second per test), slowest first — the longest-first rule, which leaves the two
workers ending within about the shortest file of each other.

Only on xdist workers (``config.workerinput``): a run in one process keeps pytest's order.
Both workers read the same file, so their collections stay identical, as xdist requires.
Refresh the figures with ``scripts/test_durations.py <junit.xml>`` after a run with
``--junitxml``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
_UNKNOWN_PER_TEST_S = 1.0


def _measured() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def slowest_first(items: list[pytest.Item], measured: dict[str, float]) -> list[pytest.Item]:
    """The items grouped by file, the files in falling order of their (estimated) seconds;
    within a file, and between files of equal weight, the collected order."""
    paths = [item.nodeid.split("::", 1)[0] for item in items]
    counts: dict[str, int] = {}
    for path in paths:
        counts[path] = counts.get(path, 0) + 1
    weight = {p: measured.get(p, n * _UNKNOWN_PER_TEST_S) for p, n in counts.items()}
    first_seen = {p: i for i, p in enumerate(counts)}
    order = sorted(range(len(items)), key=lambda i: (-weight[paths[i]], first_seen[paths[i]], i))
    return [items[i] for i in order]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    items[:] = slowest_first(items, _measured())
