"""`ReleasePipeline`: the steps that take a registered version to production, one at a time.

A run (`fleetgate.releases.pipeline_store.Pipeline`) goes through::

    instance_up -> suites -> gate -> instance_down            (every run)
      -> production_up -> rollout -> keep                      (release: rollout, gate passed)

- ``instance_up``: the launcher starts a temporary instance of the version (role ``eval``);
  each engine is in the run's ``engines`` before its process starts, so a gateway restarted in
  the middle adopts or stops it (`Launcher.resume`) instead of starting a second one (the same
  for ``production_up``);
- ``suites``: the model's suites run on ``alias@version`` through the gateway and are stored
  on the version, the drift suites against the parent (else production), while a probe reads
  the engines' memory (stored as the ``memory`` run); a suite already stored by this run (a
  restart in the middle) is not run again;
- ``gate``: the model's gate (`fleetgate.releases.gates`) judged from the stored runs;
- ``instance_down``: the temporary instance stopped. A gate that did not pass ends the run
  here (status ``stopped``): production was never touched;
- ``production_up``: the version's production engines (``replicas``);
- ``rollout``: a progressive rollout from the version at production (driven and judged by
  `fleetgate.releases.driver`), or a promotion when production is empty; a rollback ends the
  run ``rolled_back`` and stops the candidate's engines;
- ``keep``: the last ``keep`` production versions keep their engines (the previous ones scaled
  to ``keep_replicas``) so a rollback is a traffic shift; older ones are stopped.

Each call of `advance` runs the next step (or looks at the rollout once) and persists it; a
step that raises fails the run after tearing down what the run launched, never production.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.contract.principal import Principal
from fleetgate.extras import require
from fleetgate.http import AdminAccess
from fleetgate.releases.evalstore import EvalStore
from fleetgate.releases.gates import GateResult
from fleetgate.releases.launchers import Engines, Launcher
from fleetgate.releases.pipeline_config import ModelPipeline
from fleetgate.releases.pipeline_evals import MemoryProbe, run_drift, run_suite
from fleetgate.releases.pipeline_store import Pipeline, PipelineStore
from fleetgate.releases.registry import Registry
from fleetgate.releases.rollouts import RolloutStore
from fleetgate.releases.runner import EvalRunner
from fleetgate.releases.suites import load_suite

__all__ = ["PipelineDeps", "ReleasePipeline", "STEPS"]

log = logging.getLogger("fleetgate.releases.pipeline")

STEPS = ("instance_up", "suites", "gate", "instance_down", "production_up", "rollout", "keep")
_ACTOR = Principal(key_id="pipeline", role="master")


@dataclass
class PipelineDeps:
    """What the steps use: stores, the launcher, the gate, the gateway to evaluate through."""

    store: PipelineStore
    registry: Registry
    evals: EvalStore
    rollouts: RolloutStore
    launcher: Launcher
    gate: Callable[[str, str], Awaitable[GateResult]]
    access: AdminAccess
    gateway_url: Callable[[], str]
    master_key: Callable[[], str | None]
    changed: Callable[[], Awaitable[None]]  # apply a registry or rollout change here at once
    now_ms: Callable[[], int]


class StepFailed(Exception):
    """A step could not do its job; the run fails with this reason."""


class ReleasePipeline:
    def __init__(self, deps: PipelineDeps, owner: str) -> None:
        self.deps = deps
        self.owner = owner

    async def advance(self, run: Pipeline, cfg: ModelPipeline) -> Pipeline | None:
        """Run the next step of ``run``; the run as stored after it (None if it moved)."""
        name = _next_step(run, cfg)
        if name is None:
            return None
        current = run.steps[-1] if run.steps and run.steps[-1]["name"] == name else None
        if current is None:
            started = {"name": name, "status": "running", "started_ms": self.deps.now_ms(),
                       "finished_ms": None, "detail": {}, "by": self.owner}  # fmt: skip
            moved = await self.deps.store.change(run, steps=[*run.steps, started])
            if moved is None:
                return None
            run = moved
            await self._audit(f"pipeline.{name}.start", run, {})
        elif current.get("by") != self.owner and self.owner not in current.get("resumed", []):
            # another replica (or this gateway before a restart) began it: resume it here
            resumed = {**current, "resumed": [*current.get("resumed", []), self.owner]}
            moved = await self.deps.store.change(run, steps=[*run.steps[:-1], resumed])
            if moved is None:
                return None
            run = moved
            await self._audit(f"pipeline.{name}.resume", run, {"by": self.owner})
        try:
            outcome = await getattr(self, f"_{name}")(run, cfg)
        except Exception as exc:
            log.warning("pipeline %s@%s: %s failed: %s", run.model, run.version, name, exc)
            return await self._fail(run, name, f"{name}: {exc}")
        if outcome is None:  # waiting (the rollout is under way)
            return await self.deps.store.get(run.model, run.version)
        detail, extra = outcome
        run = await self.deps.store.get(run.model, run.version)
        last = {
            **run.steps[-1],
            "status": "done",
            "finished_ms": self.deps.now_ms(),
            "detail": detail,
        }
        steps = [*run.steps[:-1], last]
        moved = await self.deps.store.change(run, steps=steps, **extra)
        if moved is not None:
            await self._audit(f"pipeline.{name}.done", moved, detail)
        return moved

    # -- steps: each returns (detail, columns to set) or None (not finished yet) ---------------

    async def _instance_up(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        engines, current = await self._launch(run, "eval", 1)
        detail = {"urls": engines.urls, **_adopted(engines)}
        return detail, {"engines": {**current.engines, "eval": engines.to_dict()}}

    async def _suites(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        eval_engines = await self._eval_engines(run)
        stages = await self.deps.registry.stages(run.model)
        version = await self.deps.registry.version(run.model, run.version)
        production = stages.get("production")
        reference = version.get("parent_version") or production
        key = self.deps.master_key()
        if not key:
            raise StepFailed("the gateway has no master key to run suites with")
        # the SDK's first import takes seconds of CPU on a busy machine: off the event loop,
        # which meanwhile serves traffic and renews this run's lease
        await asyncio.to_thread(require, "openai", extra="eval", purpose="the pipeline's suites")
        runner = EvalRunner(self.deps.gateway_url().rstrip("/") + "/v1", key,
                            concurrency=cfg.concurrency, timeout_s=600.0)  # fmt: skip
        done: dict[str, str] = dict(run.steps[-1]["detail"].get("runs", {}))
        try:
            async with MemoryProbe(eval_engines.urls) as probe:
                for path, drift in [(p, False) for p in cfg.suites] + [
                    (p, True) for p in cfg.drift_suites
                ]:
                    suite = load_suite(Path(path))
                    if suite.digest in done:
                        continue  # stored before a restart: one set of results
                    kwargs = {"model": run.model, "alias": run.alias, "candidate": run.version}
                    stored = (
                        await run_drift(
                            runner, self.deps.evals, suite, reference=reference, **kwargs
                        )  # fmt: skip
                        if drift
                        else await run_suite(
                            runner, self.deps.evals, suite, baseline=production, **kwargs
                        )  # fmt: skip
                    )
                    done[suite.digest] = stored["id"]
                    await self._note(run, {"runs": done})
        finally:
            await runner.aclose()
        memory = await self.deps.evals.add_run(run.model, run.version, probe.record())
        return {"runs": done, "memory": probe.peaks, "memory_run": memory["id"]}, {}

    async def _gate(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        result = await self.deps.gate(run.model, run.version)
        return {"verdict": result.verdict, "reason": result.reason}, {"gate": result.to_dict()}

    async def _instance_down(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        engines = run.engines.get("eval")
        if engines:
            await self.deps.launcher.stop(Engines.from_dict(engines))
        rest = {k: v for k, v in run.engines.items() if k != "eval"}
        verdict = (run.gate or {}).get("verdict")
        if verdict != "pass":
            reason = f"stopped at the gate ({verdict}): {(run.gate or {}).get('reason')}"
            return {}, {"engines": rest, "status": "stopped", "reason": reason}
        if cfg.release != "rollout":
            return {}, {"engines": rest, "status": "passed", "reason": "gate passed"}
        return {}, {"engines": rest}

    async def _production_up(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        engines, current = await self._launch(run, "production", cfg.replicas)
        detail = {"urls": engines.urls, **_adopted(engines)}
        return detail, {"engines": {**current.engines, "production": engines.to_dict()}}

    async def _rollout(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        detail = dict(run.steps[-1]["detail"])
        if "baseline" not in detail:
            production = (await self.deps.registry.stages(run.model)).get("production")
            if production is None or production == run.version:
                await self.deps.registry.promote(
                    run.model, "production", run.version, actor=f"pipeline:{self.owner}",
                    expected=production, detail={"pipeline": run.version},
                )  # fmt: skip
                await self.deps.changed()
                return {"baseline": None, "promoted": True}, {}
            await self.deps.rollouts.start(
                alias=run.alias, model=run.model, baseline=production, candidate=run.version,
                steps=list(cfg.steps), interval_s=cfg.interval_s, min_samples=cfg.min_samples,
            )  # fmt: skip
            await self.deps.changed()
            await self._note(run, {"baseline": production})
            return None
        rollout = await self.deps.rollouts.get(run.alias)
        if rollout.candidate != run.version or rollout.status in ("running", "paused"):
            return None
        if rollout.status == "completed":
            return {**detail, "promoted": True, "decisions": len(rollout.decisions)}, {}
        raise StepFailed(f"the rollout ended {rollout.status}: {rollout.reason}")

    async def _keep(self, run: Pipeline, cfg: ModelPipeline) -> Any:
        history = await self.deps.registry.history(run.model, limit=500)
        recent: list[str] = []
        for entry in history:
            if entry.stage == "production" and entry.to_version and entry.to_version not in recent:
                recent.append(entry.to_version)
        kept, stopped = recent[: cfg.keep], []
        for other in await self.deps.store.all(run.model):
            engines = other.engines.get("production")
            if not engines or other.version == run.version:
                continue
            launched = Engines.from_dict(engines)
            if other.version in kept:
                if launched.replicas != cfg.keep_replicas or launched.detail.get("pending"):

                    async def record(engines: Engines, of: Pipeline = other) -> None:
                        await self._set_engines(of, "production", engines, running=False)

                    launched = await self.deps.launcher.scale(
                        launched, cfg.keep_replicas, record=record
                    )
                    await self._set_engines(other, "production", launched, running=False)
                continue
            await self.deps.launcher.stop(launched)
            rest = {k: v for k, v in other.engines.items() if k != "production"}
            await self.deps.store.change(other, engines=rest)
            stopped.append(other.version)
        detail = {"kept": kept, "stopped": stopped}
        return detail, {"status": "released", "reason": f"promoted; kept {', '.join(kept)}"}

    # -- helpers -------------------------------------------------------------------------------

    async def _eval_engines(self, run: Pipeline) -> Engines:
        """The temporary instance, started again if it died (a restart in between)."""
        engines = Engines.from_dict(run.engines["eval"])
        if await self.deps.launcher.healthy(engines):
            return engines
        fresh, _ = await self._launch(run, "eval", 1)
        await self._set_engines(run, "eval", fresh)
        return fresh

    async def _launch(self, run: Pipeline, role: str, replicas: int) -> tuple[Engines, Pipeline]:
        """The ``role`` engines of the run's version, and the run as stored after them.

        Every launch is in the run's row before its engine starts (`Record`): when a start
        was interrupted (this gateway died in the middle), what it left is found again and
        adopted or stopped (`Launcher.resume`) rather than started a second time on a busy
        port and left running."""
        version = await self.deps.registry.version(run.model, run.version)

        async def record(engines: Engines) -> None:
            await self._set_engines(run, role, engines)

        left = (await self.deps.store.get(run.model, run.version)).engines.get(role)
        launcher = self.deps.launcher
        if left:
            engines = await launcher.resume(version, Engines.from_dict(left),
                                            replicas=replicas, record=record)  # fmt: skip
        else:
            engines = await launcher.start(version, role=role, replicas=replicas,
                                           record=record)  # fmt: skip
        return engines, await self.deps.store.get(run.model, run.version)

    async def _set_engines(
        self, run: Pipeline, role: str, engines: Engines, *, running: bool = True
    ) -> None:
        """Store ``engines`` as the run's ``role`` engines (compare-and-set, re-read on a
        race with another write to the row); ``running``: only while the run is."""
        for _ in range(5):
            current = await self.deps.store.get(run.model, run.version)
            if running and current.status != "running":
                raise StepFailed(f"the run is {current.status}")
            moved = await self.deps.store.change(
                current, engines={**current.engines, role: engines.to_dict()}
            )
            if moved is not None:
                return
        raise StepFailed("the run changed under this step")

    async def _note(self, run: Pipeline, detail: dict[str, Any]) -> None:
        """Save progress inside the running step (what a restart must not redo)."""
        current = await self.deps.store.get(run.model, run.version)
        last = current.steps[-1]
        steps = [*current.steps[:-1], {**last, "detail": {**last["detail"], **detail}}]
        if await self.deps.store.change(current, steps=steps) is None:
            raise StepFailed("the run changed under this step")

    async def _fail(self, run: Pipeline, name: str, reason: str) -> Pipeline | None:
        """Tear down what this run launched (never production's engines) and fail it."""
        run = await self.deps.store.get(run.model, run.version)
        rollout_done = run.done("rollout") is not None
        rest = dict(run.engines)
        for role in ("eval", "production"):
            if role in rest and not (role == "production" and rollout_done):
                try:
                    await self.deps.launcher.stop(Engines.from_dict(rest.pop(role)))
                except Exception as exc:  # reported; the run fails either way
                    log.warning("could not stop %s engines of %s: %s", role, run.version, exc)
        last = run.steps[-1]
        failed = {**last, "status": "failed", "finished_ms": self.deps.now_ms(),
                  "detail": {**last["detail"], "error": reason}}  # fmt: skip
        steps = [*run.steps[:-1], failed]
        status = "rolled_back" if name == "rollout" else "failed"
        moved = await self.deps.store.change(run, steps=steps, engines=rest, status=status,
                                             reason=reason[:2000])  # fmt: skip
        if moved is not None:
            await self._audit(f"pipeline.{name}.failed", moved, {"reason": reason})
        return moved

    async def _audit(self, action: str, run: Pipeline, detail: dict[str, Any]) -> None:
        try:
            await self.deps.access.record(_ACTOR, action, f"{run.model}@{run.version}",
                                          {"status": run.status, **detail})  # fmt: skip
        except Exception as exc:  # the audit log may be away; the step stands
            log.warning("could not audit %s: %s", action, exc)


def _adopted(engines: Engines) -> dict[str, Any]:
    """The engines a resumed launch found running (started before a restart), if any."""
    adopted = engines.detail.get("adopted")
    return {"adopted": adopted} if adopted else {}


def _next_step(run: Pipeline, cfg: ModelPipeline) -> str | None:
    if run.status != "running":
        return None
    if run.steps and run.steps[-1]["status"] == "running":
        return str(run.steps[-1]["name"])
    finished = {s["name"] for s in run.steps if s["status"] == "done"}
    for name in STEPS:
        if name not in finished:
            return name
    return None
