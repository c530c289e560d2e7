"""Response caches: hit rate and latency of repeated requests, against the same gateway with
the cache off, measured in the same run.

A simulated engine (``fleetgate.sim``, a few milliseconds per decode step) answers; one
gateway has no cache, the other the alias's exact cache (``--semantic``: the semantic cache,
with paraphrased repeats). The workload is a fixed sequence of chat requests drawn from a
small set of questions with a Zipf-like skew (``--requests`` over ``--distinct``), sent one
at a time (``--stream``: as streams). Each run starts both gateways fresh (empty caches); the
script prints each run and the median of ``--runs`` runs:

    PYTHONPATH=src python bench/cache/run.py                 # exact cache, median of 5
    PYTHONPATH=src python bench/cache/run.py --stream
    PYTHONPATH=src python bench/cache/run.py --semantic      # loads MiniLM once (seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.http.serving import served
from fleetgate.resources.minilm import MiniLM
from fleetgate.sim import SimConfig, running_sim

MASTER = "sk-bench-master"
TOPICS = ["refunds", "shipping times", "password resets", "invoices", "data export",
          "API rate limits", "team seats", "SSO setup", "billing cycles", "account deletion",
          "two-factor login", "webhooks", "usage reports", "plan upgrades", "tax receipts",
          "regional hosting", "audit logs", "key rotation", "uptime", "support hours",
          "discounts", "trial length", "data retention", "file size limits", "mobile apps",
          "integrations", "GDPR requests", "price changes", "cancellations",
          "onboarding"]  # fmt: skip
PHRASES = ["How do {t} work?", "Can you explain how {t} work?", "how do {t} work"]


@dataclass
class Run:
    hit_rate: float
    p50_ms: float
    p90_ms: float
    hit_p50_ms: float | None
    miss_p50_ms: float | None
    wrong_hits: int  # hits answered with another question's answer (not streamed runs)
    total_s: float


def workload(requests: int, distinct: int, semantic: bool, seed: int) -> list[tuple[str, str]]:
    """(topic, question) in order: Zipf-like popularity, the same sequence every run."""
    rng = random.Random(seed)
    topics = TOPICS[:distinct]
    weights = [1 / (i + 1) for i in range(len(topics))]
    out = []
    for _ in range(requests):
        topic = rng.choices(topics, weights)[0]
        phrase = rng.choice(PHRASES) if semantic else PHRASES[0]
        out.append((topic, phrase.format(t=topic)))
    return out


@asynccontextmanager
async def gateway(
    upstream: str, cache: dict[str, Any] | None, data_dir: Path, minilm: MiniLM | None
) -> AsyncIterator[str]:
    alias: dict[str, Any] = {
        "alias": "tiny",
        "deployments": [{"provider": "openai", "model": "tiny", "api_base": upstream}],
    }
    if cache is not None:
        alias["cache"] = cache
    config = parse_config(
        {"models": [alias], "health": {"probe_interval_s": 30}, "tenancy": {"enabled": False}}
    )
    settings = Settings(master_key=MASTER, data_dir=data_dir, watch_config=False)
    state = build_state(settings, config)
    if minilm is not None:
        state.resources.minilm = minilm
    async with served(create_app(settings, state=state)) as url:
        yield url


async def drive(url: str, questions: list[tuple[str, str]], stream: bool, semantic: bool) -> Run:
    latencies: list[float] = []
    hits: list[float] = []
    misses: list[float] = []
    made_for: dict[bytes, str] = {}  # a fresh answer -> the topic it answered
    wrong = 0
    headers = {"Authorization": f"Bearer {MASTER}"}
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        for topic, q in questions:
            body: dict[str, Any] = {
                "model": "tiny",
                "messages": [{"role": "user", "content": q}],
                "max_tokens": 32,
                "stream": stream,
            }
            if not semantic:
                body["temperature"] = 0
            t0 = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
                raw = await r.read()
                assert r.status == 200, r.status
                hit = r.headers.get("x-fleetgate-cache", "").startswith("hit")
            elapsed = (time.perf_counter() - t0) * 1000
            latencies.append(elapsed)
            (hits if hit else misses).append(elapsed)
            if not stream:
                text = orjson.dumps(orjson.loads(raw)["choices"][0]["message"]["content"])
                if hit:
                    wrong += made_for.get(text, topic) != topic
                else:
                    made_for.setdefault(text, topic)
    total = time.perf_counter() - started
    qs = statistics.quantiles(latencies, n=10)
    return Run(
        hit_rate=len(hits) / len(latencies),
        p50_ms=statistics.median(latencies),
        p90_ms=qs[-1],
        hit_p50_ms=statistics.median(hits) if hits else None,
        miss_p50_ms=statistics.median(misses) if misses else None,
        wrong_hits=wrong,
        total_s=total,
    )


async def one_run(
    args: argparse.Namespace,
    upstream: str,
    questions: list[tuple[str, str]],
    minilm: MiniLM | None,
) -> tuple[Run, Run]:
    cache: dict[str, Any] = (
        {"semantic": {"threshold": args.threshold, "ttl_s": 600}}
        if args.semantic
        else {"exact": True, "ttl_s": 600}
    )
    with tempfile.TemporaryDirectory() as tmp:
        async with gateway(upstream, None, Path(tmp) / "off", None) as off_url:
            off = await drive(off_url, questions, args.stream, args.semantic)
        async with gateway(upstream, cache, Path(tmp) / "on", minilm) as on_url:
            on = await drive(on_url, questions, args.stream, args.semantic)
    return off, on


def show(name: str, r: Run) -> str:
    hit = f"{r.hit_p50_ms:.2f}" if r.hit_p50_ms is not None else "-"
    miss = f"{r.miss_p50_ms:.2f}" if r.miss_p50_ms is not None else "-"
    return (
        f"{name}: hit rate {r.hit_rate:.0%} ({r.wrong_hits} wrong), p50 {r.p50_ms:.2f} ms, "
        f"p90 {r.p90_ms:.2f} ms, hit p50 {hit} ms, miss p50 {miss} ms, total {r.total_s:.2f} s"
    )


async def main(args: argparse.Namespace) -> None:
    sim = SimConfig(
        mode="random", decode_ms_per_step=args.decode_ms, output_len=32, prefill_ms_per_token=0.01
    )
    questions = workload(args.requests, args.distinct, args.semantic, args.seed)
    minilm = None
    if args.semantic:
        minilm = MiniLM()
        await asyncio.to_thread(minilm.model)
    runs: list[tuple[Run, Run]] = []
    async with running_sim(sim, port=0) as base:
        for i in range(args.runs):
            off, on = await one_run(args, f"{base}/v1", questions, minilm)
            runs.append((off, on))
            print(f"run {i + 1}: {show('off', off)}\n       {show('on ', on)}")
    med = statistics.median
    off_p50, on_p50 = med(r[0].p50_ms for r in runs), med(r[1].p50_ms for r in runs)
    off_total, on_total = med(r[0].total_s for r in runs), med(r[1].total_s for r in runs)
    hit_p50 = [r[1].hit_p50_ms for r in runs if r[1].hit_p50_ms is not None]
    miss_p50 = med(r[1].miss_p50_ms or 0.0 for r in runs)
    best = 1 - len(set(questions)) / len(questions) if not args.semantic else None
    best_topics = 1 - len({t for t, _ in questions}) / len(questions)
    mode = "semantic" if args.semantic else "exact"
    print(
        f"\n{mode} cache, {args.requests} requests over {args.distinct} questions"
        f"{' (stream)' if args.stream else ''}, median of {args.runs} runs:\n"
        f"  hit rate {med(r[1].hit_rate for r in runs):.1%} (repeats of a question seen "
        f"before: {best if best is not None else best_topics:.1%}; answers for another "
        f"question: median {med(r[1].wrong_hits for r in runs)})\n"
        f"  p50 latency: off {off_p50:.2f} ms, on {on_p50:.2f} ms "
        f"(on/off {on_p50 / off_p50:.2f}x)\n"
        f"  p50 latency of hits: {med(hit_p50):.2f} ms (hit/off {med(hit_p50) / off_p50:.3f}x)\n"
        f"  p50 latency of misses: {miss_p50:.2f} ms (miss/off {miss_p50 / off_p50:.2f}x)\n"
        f"  total time: off {off_total:.2f} s, on {on_total:.2f} s (on/off "
        f"{on_total / off_total:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--distinct", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--semantic", action="store_true")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--decode-ms", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
