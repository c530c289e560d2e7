"""`PipelineDriver`: starts release pipelines for new versions and drives the running ones.

Every replica runs the loop; each tick it

- starts a run for each version of a model whose pipeline is ``auto`` that was registered
  within ``auto_window_s`` and has none (one per version: the table's key refuses a second);
- takes or renews the lease of each running run (`PipelineStore.lease`) and, holding it, runs
  its next steps (`ReleasePipeline.advance`) until the run waits (a rollout under way) or ends.
  While a long step runs (the suites), a task renews the lease every ``lease_s / 3``; if the
  lease went to another replica meanwhile (this one's loop stalled past ``lease_s``), the step
  is cancelled here, since the other replica resumes it.

A replica that dies stops renewing; another takes over after ``lease_s`` and resumes from the
last finished step (a suite stored before the crash is not run again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from fleetgate.errors import Conflict
from fleetgate.releases.pipeline import ReleasePipeline
from fleetgate.releases.pipeline_config import PipelinesConfig
from fleetgate.releases.pipeline_store import Pipeline
from fleetgate.tasks import RunsInBackground, cancel_and_wait, periodic

__all__ = ["PipelineDriver"]

log = logging.getLogger("fleetgate.releases.pipeline")
_MAX_STEPS_PER_TICK = 16  # a run has seven steps; the rest is the rollout's waiting


class PipelineDriver(RunsInBackground):
    def __init__(self, pipeline: ReleasePipeline, config: Callable[[], PipelinesConfig]) -> None:
        self.pipeline = pipeline
        self.config = config
        # the store may be away: logged, tried again next tick
        self._task = periodic(lambda: self.config().tick_s, self.tick, log, "pipeline tick failed")

    @property
    def owner(self) -> str:
        return self.pipeline.owner

    async def tick(self) -> None:
        cfg = self.config()
        if not cfg.models:
            return
        await self._start_new(cfg)
        deps = self.pipeline.deps
        for run in await deps.store.all(status="running"):
            if run.model in cfg.models:
                await self._drive(run, cfg)

    async def _start_new(self, cfg: PipelinesConfig) -> None:
        deps = self.pipeline.deps
        since = deps.now_ms() - int(cfg.auto_window_s * 1000)
        for model, mp in cfg.models.items():
            if not mp.auto:
                continue
            try:
                versions = (await deps.registry.model(model))["versions"]
            except Exception:  # not registered yet
                continue
            have = {p.version for p in await deps.store.all(model)}
            for v in versions:
                if v["version"] in have or v["created_ms"] < since or v["status"] != "ready":
                    continue
                stages = await deps.registry.stages(model)
                if v["version"] in {s for s in stages.values() if s}:
                    continue  # already serving: nothing to release
                with contextlib.suppress(Conflict):  # another replica made it first
                    await deps.store.create(model, v["version"], mp.alias)

    async def _drive(self, run: Pipeline, cfg: PipelinesConfig) -> None:
        store = self.pipeline.deps.store
        if not await store.lease(run.model, run.version, self.owner, cfg.lease_s):
            return  # another replica drives it
        loop = asyncio.get_running_loop()
        steps = loop.create_task(self._advance(run, cfg))
        lease = loop.create_task(self._hold_lease(run, cfg))
        try:
            await asyncio.wait({steps, lease}, return_when=asyncio.FIRST_COMPLETED)
            if lease.done() and not steps.done():
                # Another replica took the run over (this one's loop stalled past the lease, or
                # its renewal reached the store late): it resumes the step, so this replica
                # stops its copy now rather than running it to the end beside the other (two
                # suites on one instance; one replica stopping the instance under the other's
                # requests, which then cools the version's deployment down on this replica).
                log.warning(
                    "pipeline %s@%s: the lease went to another replica; step stopped here",
                    run.model, run.version,
                )  # fmt: skip
        finally:
            await cancel_and_wait(lease, None if steps.done() else steps)
        failure = None if steps.cancelled() else steps.exception()
        if failure is not None:
            raise failure

    async def _advance(self, run: Pipeline, cfg: PipelinesConfig) -> None:
        store = self.pipeline.deps.store
        mp = cfg.models[run.model]
        current: Pipeline | None = await store.get(run.model, run.version)
        for _ in range(_MAX_STEPS_PER_TICK):
            if current is None or current.status != "running":
                return
            nxt = await self.pipeline.advance(current, mp)
            if nxt is None or (nxt.steps and nxt.steps[-1]["status"] == "running"):
                return  # moved meanwhile, or waiting (the rollout): look again next tick
            current = nxt

    async def _hold_lease(self, run: Pipeline, cfg: PipelinesConfig) -> None:
        """Renew the lease every ``lease_s / 3`` while the steps run; returns once it is lost
        (another replica holds it). A store that does not answer is logged and tried again:
        the lease is only lost once another replica has it."""
        store = self.pipeline.deps.store
        while True:
            await asyncio.sleep(cfg.lease_s / 3)
            try:
                held = await store.lease(run.model, run.version, self.owner, cfg.lease_s)
            except Exception as exc:
                log.warning("could not renew the pipeline lease: %s", exc)
                continue
            if not held:
                return
