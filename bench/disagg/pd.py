"""Prefill/decode disaggregation vs aggregated serving at equal GPU count, and the crossover.

Two fleets of ``--engines`` simulated vLLM engines each, in one run: *aggregated* (every engine
serves whole requests; ``strategy: kv-aware``) and *PD* (``--prefill`` engines tagged
``prefill``, the rest ``decode``; ``strategy: pd-disagg``: prefill request with
``kv_transfer_params``, then the decode request carrying them; the simulator models the KV
pull at ``kv_transfer_ms_per_token``). Engine timing: ``--prefill-ms`` per prompt token,
``--decode-ms`` per decode step, chunked prefill of ``--chunk`` tokens per step (so a long
prefill on an aggregated engine stretches the decode steps of the requests running beside it).

Workload per prompt length: Poisson arrivals at ``--rate`` requests/s, ``--requests`` streamed
requests, each a shared document prefix (``--docs`` documents, 3/4 of the prompt) plus a unique
question, ``--max-tokens`` output tokens (``ignore_eos``). TTFT and ITL (gaps between streamed
tokens) are measured by the client through the gateway; p90 over all requests of a run, median of
``--runs`` runs (prefix caches reset between runs). The crossover is the shortest prompt length
from which PD's TTFT p90 is no worse than aggregated.

    python bench/disagg/pd.py [--lengths 1024,2048,4096,8192] [--runs 5] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MASTER, gateway_process, sim_fleet, write_section  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _words(n_tokens: int, tag: str, rng: random.Random) -> str:
    # The simulator's tokenizer gives about 2 tokens per word of this shape.
    return " ".join(f"{tag}{rng.randrange(10_000)}" for _ in range(max(1, n_tokens // 2)))


async def _one(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[float | None, list[float]]:
    started = time.perf_counter()
    ttft: float | None = None
    gaps: list[float] = []
    last = started
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with http.post(url, json=body, headers=headers) as resp:
        if resp.status != 200:
            await resp.read()
            return None, []
        buf = b""
        async for raw in resp.content.iter_any():
            buf += raw
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data = event.removeprefix(b"data: ")
                if data == b"[DONE]" or not data.startswith(b"{"):
                    continue
                choices = json.loads(data).get("choices") or []
                if not choices or not choices[0].get("delta", {}).get("content"):
                    continue
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - started
                else:
                    gaps.append(now - last)
                last = now
    return ttft, gaps


async def poisson_replay(
    base: str, bodies: list[dict[str, Any]], rate: float, seed: int
) -> tuple[list[float], list[float], int]:
    """Send ``bodies`` to the gateway at ``base`` as a Poisson process of ``rate`` per second
    (open loop); returns every answered request's TTFT, every inter-token gap, and the errors."""
    rng = random.Random(seed)
    url = f"{base}/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        tasks = []
        at = 0.0
        t0 = time.perf_counter()
        for body in bodies:
            at += rng.expovariate(rate)
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(http, url, body)))
        results = await asyncio.gather(*tasks)
    ttfts = [t for t, _ in results if t is not None]
    gaps = [g for _, gs in results for g in gs]
    return ttfts, gaps, sum(t is None for t, _ in results)


async def _replay(
    base: str, bodies: list[dict[str, Any]], rate: float, seed: int
) -> dict[str, Any]:
    ttfts, gaps, errors = await poisson_replay(base, bodies, rate, seed)
    return {"ttft_p90": _pct(ttfts, 0.9), "itl_p90": _pct(gaps, 0.9), "errors": errors}


def _bodies(length: int, args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    docs = [_words(length * 3 // 4, f"d{d}w", rng) for d in range(args.docs)]
    out = []
    for i in range(args.requests):
        question = f"q{i} " + _words(length // 4, "q", rng)
        out.append({"model": "chat", "stream": True, "max_tokens": args.max_tokens,
                    "ignore_eos": True, "messages": [
                        {"role": "system", "content": rng.choice(docs)},
                        {"role": "user", "content": question}]})  # fmt: skip
    return out


def _config(mode: str, sims: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    deployments = []
    for i, sim in enumerate(sims):
        dep: dict[str, Any] = {"model": "tiny", "api_base": f"{sim.url}/v1", "name": f"e{i}",
                               "kv_events": {"endpoint": sim.events,
                                             "replay_endpoint": sim.replay}}  # fmt: skip
        if mode == "pd":
            dep["tags"] = ["prefill"] if i < args.prefill else ["decode"]
        deployments.append(dep)
    return {
        "models": [{"alias": "chat", "strategy": "pd-disagg" if mode == "pd" else "kv-aware",
                    "deployments": deployments, "num_retries": 0}],
        "server": {"access_log": False},
        "router": {"timeouts": {"first_token": 120, "total": 170}},
        "routing": {"scrape_interval_s": 0.1, "tenant_isolation": False,
                    "decision_sample_rate": 0.05,
                    "kv_aware": {"prefill_ms_per_token": args.prefill_ms,
                                 "decode_ms_per_step": args.decode_ms,
                                 "max_num_batched_tokens": args.chunk,
                                 "pd_min_prompt_tokens": 1}},
    }  # fmt: skip


def _reset(sims: list[Any]) -> None:
    for sim in sims:
        req = urllib.request.Request(f"{sim.url}/reset_prefix_cache", b"", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


def run_mode(mode: str, length: int, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    timing = ("--prefill-ms-per-token", str(args.prefill_ms),
              "--decode-ms-per-step", str(args.decode_ms),
              "--max-num-batched-tokens", str(args.chunk), "--max-model-len", "65536",
              "--output-len", str(args.max_tokens))  # fmt: skip
    runs = []
    with ExitStack() as stack:
        sims = stack.enter_context(
            sim_fleet(args.engines, tmp, kv_blocks=args.kv_blocks, events=True, extra=timing)
        )
        base = stack.enter_context(gateway_process(_config(mode, sims, args), tmp, MASTER))
        for r in range(args.runs):
            _reset(sims)
            time.sleep(0.3)
            bodies = _bodies(length, args, seed=r)
            runs.append(asyncio.run(_replay(base, bodies, args.rate, seed=r)))
    out = {k: statistics.median(run[k] for run in runs) for k in ("ttft_p90", "itl_p90")}
    out["errors"] = sum(run["errors"] for run in runs)
    return out


def _table(results: dict[int, dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.engines} simulated engines per fleet (PD: {args.prefill} prefill + "
        f"{args.engines - args.prefill} decode); prefill {args.prefill_ms} ms/token, decode step "
        f"{args.decode_ms} ms, chunked prefill {args.chunk} tokens/step, KV pull 0.0025 ms/token; "
        f"{args.requests} streamed requests at {args.rate}/s (Poisson), {args.docs} shared "
        f"documents (3/4 of each prompt), {args.max_tokens} output tokens; p90 per run, median of "
        f"{args.runs} runs.",
        "",
        "| prompt tokens | aggregated TTFT p90 | PD TTFT p90 | PD / agg TTFT "
        "| aggregated ITL p90 | PD ITL p90 | PD / agg ITL | errors (agg, PD) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    crossover = None
    for length in sorted(results):
        agg, pd = results[length]["aggregated"], results[length]["pd"]
        lines.append(
            f"| {length} | {agg['ttft_p90'] * 1000:.0f} ms | {pd['ttft_p90'] * 1000:.0f} ms "
            f"| {pd['ttft_p90'] / agg['ttft_p90']:.2f} | {agg['itl_p90'] * 1000:.1f} ms "
            f"| {pd['itl_p90'] * 1000:.1f} ms | {pd['itl_p90'] / agg['itl_p90']:.2f} "
            f"| {agg['errors']:.0f}, {pd['errors']:.0f} |"
        )
        if crossover is None and pd["ttft_p90"] <= agg["ttft_p90"]:
            crossover = length
        elif pd["ttft_p90"] > agg["ttft_p90"]:
            crossover = None
    lines.append("")
    lines.append(
        f"Crossover (TTFT p90): PD pays from {crossover} prompt tokens on."
        if crossover is not None
        else "Crossover (TTFT p90): PD did not pay at any measured length."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="1024,2048,4096,8192")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--rate", type=float, default=4.0)
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--prefill", type=int, default=2)
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--prefill-ms", type=float, default=0.05)
    p.add_argument("--decode-ms", type=float, default=10.0)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--kv-blocks", type=int, default=8192)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    results: dict[int, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for length in [int(x) for x in args.lengths.split(",")]:
            results[length] = {
                m: run_mode(m, length, args, Path(tmp)) for m in ("aggregated", "pd")
            }
            print(length, results[length], flush=True)
    table = _table(results, args)
    print(table)
    if args.write_docs:
        split = f"{args.prefill}P+{args.engines - args.prefill}D"
        title = f"Prefill/decode disaggregation vs aggregated, {args.rate:g} requests/s, {split}"
        write_section(title, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
