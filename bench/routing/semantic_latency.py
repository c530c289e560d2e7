"""Semantic router classification latency on this CPU (p50/p90 over a few hundred requests).

Runs `SemanticStage.classify` on the event loop exactly as a request does (rules, then the
encoder in its worker thread), one request at a time, over the held-out sentences; rule hits
are reported apart, because they never touch the model. Prints one JSON object.

    PYTHONPATH=src python bench/routing/semantic_latency.py [--n 300] [--fp32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from fleetgate.routing.semantic import load_examples
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.routing.semantic_stage import SemanticStage

HELDOUT = Path(__file__).resolve().parents[2] / "tests/routing/data/intents_heldout.jsonl"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(n: int, quantize: bool) -> dict[str, object]:
    intents = ["code", "math", "retrieval", "reasoning", "chitchat"]
    cfg = SemanticConfig.model_validate(
        {"intents": {i: {"alias": "x"} for i in intents}, "quantize": quantize}
    )
    texts = [e.text for e in load_examples(HELDOUT.read_text("utf-8").splitlines())]
    with tempfile.TemporaryDirectory() as tmp:
        stage = SemanticStage(cfg, Path(tmp))
        t0 = time.perf_counter()
        await stage.start()
        if not await stage.wait_ready(120):
            raise SystemExit("model did not load")
        load_s = time.perf_counter() - t0
        for t in texts[:10]:  # warm-up
            await stage.classify(t)
        model_ms: list[float] = []
        rule_ms: list[float] = []
        for i in range(n):
            text = texts[i % len(texts)]
            start = time.perf_counter()
            decision = await stage.classify(text)
            ms = (time.perf_counter() - start) * 1000
            (rule_ms if decision.source == "rule" else model_ms).append(ms)
        await stage.aclose()
    every = model_ms + rule_ms
    return {
        "encoder": "all-MiniLM-L6-v2 " + ("int8" if quantize else "fp32"),
        "requests": n, "load_s": round(load_s, 2),
        "all_p50_ms": round(statistics.median(every), 2), "all_p90_ms": round(_pct(every, 0.9), 2),
        "model_n": len(model_ms),
        "model_p50_ms": round(statistics.median(model_ms), 2),
        "model_p90_ms": round(_pct(model_ms, 0.9), 2),
        "rule_n": len(rule_ms),
        "rule_p50_ms": round(statistics.median(rule_ms), 3) if rule_ms else None,
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--fp32", action="store_true", help="no int8 quantisation (baseline)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.n, not args.fp32))))
