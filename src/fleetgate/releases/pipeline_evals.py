"""What the pipeline measures on a candidate: its suites through the gateway, long
generations compared with a reference version (drift), and the engines' memory.

- `run_suite`: the suite on ``alias@candidate`` with the official ``openai`` SDK, the run
  stored on the version (with the paired comparison against ``baseline`` when that version has
  a stored run of the same suite, run now if it has none and is served).
- `run_drift`: a long-generation suite; each item's output is compared word by word with the
  reference version's output for the same item (its stored run of the suite, or a run now):
  ``drift_agreement`` is the mean share of the reference's words matched before the first
  difference, ``drift_diverged`` the share of items that differ anywhere. A build whose
  output goes wrong only past N tokens passes a short golden suite and fails here.
- `MemoryProbe`: samples the engines' Prometheus metrics while the suites run and keeps the
  peaks of ``process_resident_memory_bytes`` and vLLM's KV-cache usage
  (``vllm:kv_cache_usage_perc``, or ``vllm:gpu_cache_usage_perc`` of older vLLM).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import aiohttp

from fleetgate.releases.evalstore import EvalStore, RunRecord
from fleetgate.releases.runner import EvalRunner, Outcome, compare, summarise
from fleetgate.releases.suites import Suite

__all__ = ["MEMORY_DIGEST", "MemoryProbe", "agreement", "run_drift", "run_suite"]

MEMORY_DIGEST = hashlib.sha256(b"fleetgate:engine-memory:v1").hexdigest()[:32]
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_RSS = "process_resident_memory_bytes"


def agreement(output: str, reference: str) -> float:
    """The share of ``reference``'s words that ``output`` matches before the first difference
    (1.0 when they are equal)."""
    mine, theirs = output.split(), reference.split()
    if mine == theirs:
        return 1.0
    same = 0
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            break
        same += 1
    return same / max(len(theirs), len(mine), 1)


def _record(suite: Suite, outcomes: Sequence[Outcome], metrics: dict[str, float],
            comparison: dict[str, Any] | None) -> RunRecord:  # fmt: skip
    return RunRecord.model_validate({
        "suite": suite.name, "suite_digest": suite.digest, "metrics": metrics,
        "comparison": comparison, "items": [o.to_dict() for o in outcomes],
    })  # fmt: skip


async def _stored(evals: EvalStore, model: str, version: str, digest: str) -> Any:
    latest = await evals.latest(model, version)
    found = latest.get(digest)
    return None if found is None else await evals.run(found["id"])


def _outcomes(run: Any) -> list[Outcome]:
    fields = ("item_id", "kind", "score", "passed", "output", "ttft_ms", "error")
    return [Outcome(**{f: item.get(f) for f in fields}) for item in run["items"]]


async def _reference(
    runner: EvalRunner, evals: EvalStore, suite: Suite, model: str, alias: str, version: str
) -> list[Outcome] | None:
    """``version``'s outcomes on ``suite``: stored, else run now and stored (when it served)."""
    stored = await _stored(evals, model, version, suite.digest)
    if stored is not None:
        return _outcomes(stored)
    outcomes = await runner.run(suite, f"{alias}@{version}")
    if all(o.error is not None for o in outcomes):
        return None  # not served (archived, or its engines are gone)
    metrics = summarise(outcomes)
    if any(o.output is not None for o in outcomes):
        metrics = {**metrics, "drift_agreement": 1.0, "drift_diverged": 0.0}
    await evals.add_run(model, version, _record(suite, outcomes, metrics, None))
    return outcomes


async def _runs(
    runner: EvalRunner, evals: EvalStore, suite: Suite, model: str, alias: str, candidate: str,
    other: str | None,
) -> tuple[list[Outcome], list[Outcome] | None]:  # fmt: skip
    """The candidate's outcomes on ``suite`` (run now), and ``other``'s (`_reference`; None when
    there is no other version, it is the candidate itself, or it did not serve)."""
    mine = await runner.run(suite, f"{alias}@{candidate}")
    if other is None or other == candidate:
        return mine, None
    return mine, await _reference(runner, evals, suite, model, alias, other)


async def run_suite(
    runner: EvalRunner, evals: EvalStore, suite: Suite, *, model: str, alias: str,
    candidate: str, baseline: str | None,
) -> dict[str, Any]:  # fmt: skip
    """Run ``suite`` on the candidate and store it; the stored run (without items)."""
    mine, theirs = await _runs(runner, evals, suite, model, alias, candidate, baseline)
    comparison = None
    if theirs is not None:
        comparison = {"baseline_version": baseline, "kinds": compare(mine, theirs)}
    return await evals.add_run(model, candidate, _record(suite, mine, summarise(mine),
                                                         comparison))  # fmt: skip


async def run_drift(
    runner: EvalRunner, evals: EvalStore, suite: Suite, *, model: str, alias: str,
    candidate: str, reference: str | None,
) -> dict[str, Any]:  # fmt: skip
    """Run the long-generation ``suite`` on the candidate, judged against ``reference``."""
    mine, theirs = await _runs(runner, evals, suite, model, alias, candidate, reference)
    if theirs is None:  # nothing to compare with: this run is the reference of later builds
        metrics = {**summarise(mine), "drift_agreement": 1.0, "drift_diverged": 0.0}
        return await evals.add_run(model, candidate, _record(suite, mine, metrics, None))
    ref = {o.item_id: o.output or "" for o in theirs}
    judged = []
    for o in mine:
        share = agreement(o.output or "", ref.get(o.item_id, "")) if o.error is None else 0.0
        judged.append(Outcome(o.item_id, "drift", share, share >= 0.999, o.output, o.ttft_ms,
                              o.error))  # fmt: skip
    n = max(1, len(judged))
    metrics = {
        "drift_agreement": sum(o.score for o in judged) / n,
        "drift_diverged": sum(not o.passed for o in judged) / n,
        "error_rate": sum(o.error is not None for o in judged) / n,
        "items": float(len(judged)),
    }  # fmt: skip
    comparison: dict[str, Any] = {"baseline_version": reference, "kinds": {}}
    return await evals.add_run(model, candidate, _record(suite, judged, metrics, comparison))


class MemoryProbe:
    """Samples the engines' ``/metrics`` every ``every_s`` until stopped; keeps the peaks."""

    def __init__(self, urls: Sequence[str], *, every_s: float = 0.5) -> None:
        self.urls = [u.removesuffix("/").removesuffix("/v1") + "/metrics" for u in urls]
        self.every_s = every_s
        self.peaks: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MemoryProbe:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.sample()  # one last look, after the load

    async def _loop(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.every_s)

    async def sample(self) -> None:
        async with aiohttp.ClientSession() as session:
            for url in self.urls:
                try:
                    async with session.get(url, timeout=aiohttp.ClientTimeout(total=3)) as resp:
                        text = await resp.text() if resp.status == 200 else ""
                except (aiohttp.ClientError, TimeoutError, OSError):
                    continue
                self._note(text)

    def _note(self, text: str) -> None:
        rss = kv = 0.0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            base = name.partition("{")[0]
            try:
                number = float(value.split()[0]) if value else 0.0
            except ValueError:
                continue
            if base == _RSS:
                rss += number
            elif base in _KV:
                kv = max(kv, number)
        self.peaks["memory_rss_bytes"] = max(self.peaks.get("memory_rss_bytes", 0.0), rss)
        self.peaks["kv_cache_usage_perc"] = max(self.peaks.get("kv_cache_usage_perc", 0.0), kv)

    def record(self) -> RunRecord:
        """The peaks as an evaluation run (suite ``memory``), comparable between versions."""
        return RunRecord(suite="memory", suite_digest=MEMORY_DIGEST, metrics=dict(self.peaks))
