"""The ``batches:`` section of the gateway config: the Files and Batch APIs (the batch lane).

Example (YAML)::

    batches:
      max_file_bytes: 16777216      # one uploaded JSONL file
      max_lines: 50000              # requests in one batch
      max_in_progress_per_team: 4   # batches validating, in progress or cancelling
      concurrency: 4                # lines of one batch in flight on a replica

A batch's lines run through the normal request path in the ``batch`` band, only while the
alias's pool has idle capacity (`fleetgate.scheduling.scheduler.Scheduler.idle`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.sections import Section

__all__ = ["BATCHES_SECTION", "BatchesConfig"]


class BatchesConfig(BaseModel):
    """Limits and pacing of the batch lane."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # `false`: no `/v1/files` and `/v1/batches` routes and no worker
    enabled: bool = True
    # the largest JSONL file an upload may carry (16 MiB)
    max_file_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # requests in one batch at most
    max_lines: int = Field(50_000, gt=0)
    # batches of one team not yet ended (in progress, cancelling, finalizing)
    max_in_progress_per_team: int = Field(4, gt=0)
    # lines of one batch in flight at once on a replica (8 finishes a batch in about half the time,
    # at a higher interactive TTFT beside it: see "Measured")
    concurrency: int = Field(4, gt=0, le=256)
    # How often a replica looks for batches to drive that it did not create (another's, a dead
    # replica's after its lease): a batch created or cancelled here is looked at at once.
    tick_s: float = Field(2.0, gt=0, le=60)
    lease_s: float = Field(10.0, gt=0)  # a dead replica's batch is taken over after this
    idle_wait_s: float = Field(0.05, gt=0, le=10)  # recheck of a saturated pool
    # A line not answered within this fails alone (``line_timeout``); the batch goes on.
    line_timeout_s: float = Field(600.0, gt=0)
    # A line sent this many times without its result ever being recorded (each replica driving
    # it died or stalled) fails alone (``line_abandoned``) instead of being sent again.
    max_line_attempts: int = Field(3, gt=0, le=100)


BATCHES_SECTION = Section(
    "batches",
    BatchesConfig,
    reload={"": "live", "enabled": "restart"},  # its routes are registered at start
)
"""The ``batches`` section: the Files and Batch APIs."""
