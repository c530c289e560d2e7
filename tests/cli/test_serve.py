"""``fleetgate serve``'s process set-up: the start-up heap is frozen once the server listens."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
from fleetgate.cli import serve
garbage = []
garbage.append(garbage)  # a reference cycle nobody holds any more
del garbage
serve.settle_heap()
print(gc.get_freeze_count() > 1000, gc.get_threshold() == serve._GC_THRESHOLDS, gc.collect())
"""


def test_settle_heap_collects_then_freezes_start_up_objects_and_raises_the_threshold() -> None:
    # In a child process: freezing the heap of the test session would leak into other tests.
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    # Frozen, thresholds set, and the cycle was collected before freezing (none left after).
    assert out == ["True", "True", "0"]
