"""`EvalRunner`: judge one alias (``chat@v7``) through the gateway with the official ``openai``
SDK, item by item, so that the real request path is what is judged.

Each item is one streamed chat completion (temperature 0) that records the answer, the time to
first token and any error; a scorer gives it 0..1 (`fleetgate.releases.scorers`), or, for the
``judge`` scorer, another model does (`fleetgate.releases.judge`: the item's ``judge`` or the
runner's ``judge`` model, through the same gateway or any OpenAI-compatible ``judge_url``). A
red-team item the gateway blocks (400 ``content_filter``) counts as refused. ``summarise`` turns the
outcomes into the run's metrics; ``compare`` pairs two runs of the same suite item by item.

Example::

    runner = EvalRunner("http://127.0.0.1:4000/v1", "sk-master")
    outcomes = await runner.run(suite, "chat@v7")
    metrics = summarise(outcomes)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fleetgate.extras import require
from fleetgate.releases.judge import judge_prompt, verdict
from fleetgate.releases.scorers import score
from fleetgate.releases.stats import paired_bootstrap, percentile
from fleetgate.releases.suites import EvalItem, Suite

__all__ = ["EvalRunner", "Outcome", "compare", "summarise"]

PASS_SCORE = 0.999  # an item passes at full marks (every built-in scorer gives 0 or 1)


@dataclass(frozen=True)
class Outcome:
    item_id: str
    kind: str
    score: float
    passed: bool
    output: str | None = None
    ttft_ms: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EvalRunner:
    """Runs suites against aliases of one gateway (``base_url`` ends in ``/v1``)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        judge: str | None = None,
        judge_url: str | None = None,
        judge_key: str | None = None,
    ) -> None:
        openai = require("openai", extra="eval", purpose="fleetgate eval run")
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2
        )
        self._judge_client = self._client
        if judge_url is not None:
            self._judge_client = openai.AsyncOpenAI(
                base_url=judge_url, api_key=judge_key or api_key, timeout=timeout_s,
                max_retries=2,
            )  # fmt: skip
        self.judge = judge  # the judge model of items that name none
        self.concurrency = max(1, concurrency)

    async def run(self, suite: Suite, alias: str) -> list[Outcome]:
        """Every item of ``suite`` against ``alias``, in the suite's order."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(item: EvalItem) -> Outcome:
            async with gate:
                return await self._one(item, alias)

        return list(await asyncio.gather(*(one(item) for item in suite.items)))

    async def _one(self, item: EvalItem, alias: str) -> Outcome:
        start = time.perf_counter()
        ttft: float | None = None
        parts: list[str] = []
        try:
            stream = await self._client.chat.completions.create(
                model=alias, messages=item.chat_messages(), max_tokens=item.max_tokens,
                temperature=0, stream=True,
            )  # fmt: skip
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if ttft is None:
                        ttft = (time.perf_counter() - start) * 1000
                    parts.append(chunk.choices[0].delta.content)
        except self._openai.APIError as exc:
            blocked = getattr(exc, "code", None) == "content_filter"
            value = 1.0 if blocked and item.kind == "red-team" else 0.0
            return Outcome(item.id, item.kind, value, value >= PASS_SCORE, None, ttft,
                           f"{type(exc).__name__}: {exc}"[:2000])  # fmt: skip
        output = "".join(parts)
        if item.how == "judge":
            value, error = await self._judged(item, output)
            if error is not None:
                return Outcome(item.id, item.kind, 0.0, False, output, ttft, error)
        else:
            value = score(item, output)
        return Outcome(item.id, item.kind, value, value >= PASS_SCORE, output, ttft)

    async def _judged(self, item: EvalItem, output: str) -> tuple[float, str | None]:
        model = item.judge or self.judge
        if model is None:
            return 0.0, "judge: no judge model (the item's 'judge', or --judge)"
        try:
            reply = await self._judge_client.chat.completions.create(
                model=model, temperature=0, max_tokens=128,
                messages=[{"role": "user", "content": judge_prompt(item, output)}],
            )  # fmt: skip
        except self._openai.APIError as exc:
            return 0.0, f"judge: {type(exc).__name__}: {exc}"[:2000]
        text = (reply.choices[0].message.content or "") if reply.choices else ""
        value = verdict(text)
        if value is None:
            return 0.0, f"judge: no verdict in {text[:200]!r}"
        return value, None

    async def aclose(self) -> None:
        if self._judge_client is not self._client:
            await self._judge_client.close()
        await self._client.close()


def summarise(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """The run's metrics: mean score per kind (``golden``, ``red-team``, ...), ``error_rate``,
    ``ttft_p95_ms`` / ``ttft_p50_ms`` (answered items) and ``items``."""
    by_kind: dict[str, list[float]] = {}
    for o in outcomes:
        by_kind.setdefault(o.kind, []).append(o.score)
    metrics = {kind: sum(v) / len(v) for kind, v in by_kind.items()}
    metrics["items"] = float(len(outcomes))
    metrics["error_rate"] = sum(o.error is not None for o in outcomes) / max(1, len(outcomes))
    ttfts = [o.ttft_ms for o in outcomes if o.ttft_ms is not None]
    for q in (50, 95):
        value = percentile(ttfts, q)
        if value is not None:
            metrics[f"ttft_p{q}_ms"] = value
    return metrics


def compare(
    candidate: Sequence[Outcome], baseline: Sequence[Outcome], *, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Per kind, on the items both runs have: mean score difference (candidate - baseline)
    and its 95% paired-bootstrap confidence interval."""
    theirs = {o.item_id: o for o in baseline}
    pairs: dict[str, tuple[list[float], list[float]]] = {}
    for o in candidate:
        other = theirs.get(o.item_id)
        if other is not None:
            mine, base = pairs.setdefault(o.kind, ([], []))
            mine.append(o.score)
            base.append(other.score)
    out: dict[str, dict[str, float]] = {}
    for kind, (mine, base) in sorted(pairs.items()):
        delta, low, high = paired_bootstrap(mine, base, seed=seed)
        out[kind] = {
            "delta": delta, "ci_low": low, "ci_high": high, "n": float(len(mine)),
            "candidate": sum(mine) / len(mine), "baseline": sum(base) / len(base),
        }  # fmt: skip
    return out
