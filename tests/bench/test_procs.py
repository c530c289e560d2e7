"""Several client processes follow one absolute schedule."""

from __future__ import annotations

from fleetgate.bench import Target, arrival_offsets, run_open_loop_processes, synthetic
from fleetgate.bench.lengths import parse_length_dist as dist
from tests.bench.upstream import Upstream, serve


def test_two_processes_split_one_schedule() -> None:
    specs = synthetic(40, dist("fixed:4"), dist("fixed:2"))
    offsets = arrival_offsets(40, rate=100.0)
    with serve(Upstream()) as url:
        out = run_open_loop_processes(Target(url, model="m"), specs, offsets, 2)
    assert [r.index for r in out.records] == list(range(40))
    assert all(r.success for r in out.records)
    assert [r.intended for r in out.records] == offsets
    # both processes share the start: sends line up with the merged schedule
    assert max(abs(r.sent - r.intended) for r in out.records) < 0.05
