"""`PipelineDriver`'s lease: a replica whose lease on a run went to another replica (its loop
stalled past ``lease_s``) stops the step it was running, since the other resumes it; a replica
that keeps its lease runs the step to the end."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from fleetgate.releases.pipeline import ReleasePipeline
from fleetgate.releases.pipeline_config import ModelPipeline, PipelinesConfig
from fleetgate.releases.pipeline_driver import PipelineDriver

RUN = SimpleNamespace(model="chat", version="v1", status="running", steps=[])


class Store:
    def __init__(self) -> None:
        self.held = True
        self.renewals = 0

    async def lease(self, model: str, version: str, owner: str, lease_s: float) -> bool:
        self.renewals += 1
        return self.held

    async def get(self, model: str, version: str) -> Any:
        return RUN

    async def all(self, status: str) -> list[Any]:
        return [RUN]


class Step:
    """``ReleasePipeline`` whose step takes ``seconds``; records how it ended."""

    owner = "replica-a"

    def __init__(self, store: Store, seconds: float) -> None:
        self.deps = SimpleNamespace(store=store, now_ms=lambda: int(time.time() * 1000))
        self.seconds = seconds
        self.started = asyncio.Event()
        self.ended: str | None = None

    async def advance(self, run: Any, cfg: ModelPipeline) -> Any:
        self.started.set()
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        self.ended = "finished"
        return None


def driver(step: Step) -> PipelineDriver:
    cfg = PipelinesConfig(lease_s=0.3, models={"chat": ModelPipeline(alias="chat", auto=False)})
    return PipelineDriver(cast(ReleasePipeline, step), lambda: cfg)


async def test_a_step_stops_when_its_lease_went_to_another_replica() -> None:
    store = Store()
    step = Step(store, seconds=30.0)
    began = time.monotonic()
    drive = asyncio.create_task(driver(step).tick())
    await asyncio.wait_for(step.started.wait(), 5.0)
    store.held = False  # another replica took the run over
    await asyncio.wait_for(drive, 5.0)
    assert step.ended == "cancelled"
    assert time.monotonic() - began < 1.0  # within a renewal (lease_s / 3) or two


async def test_a_step_runs_to_the_end_while_the_lease_is_renewed() -> None:
    store = Store()
    step = Step(store, seconds=0.5)
    await asyncio.wait_for(driver(step).tick(), 5.0)
    assert step.ended == "finished"
    assert store.renewals >= 3  # taken, then renewed every 0.1 s while the step ran
