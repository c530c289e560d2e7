"""An inconclusive rollout is extended, then paused for a person, never rolled back on it; a
resume starts the count over."""

from __future__ import annotations

from typing import Any

from fleetgate.releases.driver import _unsure_in_a_row
from fleetgate.releases.rollout_routes import _transition
from fleetgate.releases.rollouts import Rollout


def _d(step: int, verdict: str) -> dict[str, Any]:
    return {"step": step, "verdict": verdict}


def test_inconclusive_verdicts_count_in_a_row_on_one_step() -> None:
    decisions = [_d(0, "pass"), _d(1, "inconclusive"), _d(1, "extend"), _d(1, "inconclusive"),
                 _d(1, "inconclusive")]  # fmt: skip
    assert _unsure_in_a_row(decisions, 1) == 2  # the extend in between breaks the run
    assert _unsure_in_a_row(decisions, 0) == 0
    assert _unsure_in_a_row([], 0) == 0


def test_a_resume_is_marked_and_starts_the_count_over() -> None:
    paused = Rollout(
        alias="chat", model="chat", candidate="v2", baseline="v1", steps=[10, 100], step=0,
        percent=10.0, status="paused", interval_s=1.0, min_samples=10, step_started_ms=0,
        reason="inconclusive", owner=None, lease_until_ms=0, revision=3, started_ms=0,
        updated_ms=0, decisions=[_d(0, "inconclusive")] * 10,
    )  # fmt: skip
    values = _transition(paused, "resume")
    assert values["status"] == "running"
    assert values["decisions"][-1]["verdict"] == "resumed"
    assert _unsure_in_a_row([*values["decisions"], _d(0, "inconclusive")], 0) == 1
