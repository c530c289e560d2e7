"""Routing benchmark: round robin, least-load, kv-aware and vllm-router on one simulated fleet.

For each router a fresh fleet of ``fleetgate sim`` processes is started (same flags, cold
caches), the same schedule (bench/routing/workload.py) is replayed through the router, and the
report gives TTFT p50/p90, output tokens/s, and the prefix-cache hit rate read from the
simulators' own ``vllm:prefix_cache_*`` counters. Ratios are against round robin and
vllm-router measured in the same run.

    python bench/routing/run.py                       # the shared-prefix run, all four
    python bench/routing/run.py --no-shared --routers least-load,kv-aware
    python bench/routing/run.py --vllm-router /tmp/vllm-router-venv/bin/vllm-router
    python bench/routing/run.py --routers kv-aware --replicas 2 [--redis redis://127.0.0.1:6379/0]

vllm-router (``pip install vllm-router``) runs with ``--policy cache_aware``; it is skipped
with a note when its binary is not found.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.sse import SSEParser

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import Arrival, Workload, build_schedule  # noqa: E402

from fleet import Fleet, SimFlags, gateway_process, router_process  # noqa: E402

MASTER = "sk-bench-master"


@dataclass
class Result:
    router: str
    requests: int
    errors: int
    ttft_p50: float
    ttft_p90: float
    ttft_mean: float
    output_tokens_per_s: float
    prefix_hit_rate: float
    duration_s: float


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def _one(
    http: aiohttp.ClientSession, url: str, arrival: Arrival, headers: dict[str, str]
) -> tuple[float | None, int]:
    """(TTFT, output tokens) of one streamed request; TTFT None on failure."""
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    hdrs = {**headers, "x-session-id": arrival.user}
    try:
        async with http.post(url, json=arrival.body, headers=hdrs) as resp:
            if resp.status != 200:
                await resp.read()
                return None, 0
            parser = SSEParser()
            async for raw in resp.content.iter_any():
                for _, text in parser.feed(raw):
                    if text == "[DONE]":
                        continue
                    data = json.loads(text)
                    choices = data.get("choices") or []
                    delta = (choices[0].get("delta") or {}) if choices else {}
                    if ttft is None and delta.get("content"):
                        ttft = time.perf_counter() - started
                    usage = data.get("usage")
                    if usage:
                        tokens = int(usage.get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None, 0
    return ttft, tokens


async def replay(urls: list[str], schedule: list[Arrival], headers: dict[str, str]) -> tuple[
    list[float], int, int, float
]:  # fmt: skip
    """Send the schedule open-loop, request i to ``urls[i % len(urls)]`` (a round-robin load
    balancer in front of the replicas); returns (TTFTs, output tokens, errors, makespan)."""
    timeout = aiohttp.ClientTimeout(total=180)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        start = time.perf_counter()

        async def fire(i: int, a: Arrival) -> tuple[float | None, int]:
            delay = start + a.at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            return await _one(http, urls[i % len(urls)], a, headers)

        results = await asyncio.gather(*(fire(i, a) for i, a in enumerate(schedule)))
        makespan = time.perf_counter() - start
    ttfts = [t for t, _ in results if t is not None]
    tokens = sum(n for _, n in results)
    return ttfts, tokens, len(results) - len(ttfts), makespan


def _gateway_config(urls: list[str], strategy: str, flags: SimFlags) -> dict[str, Any]:
    deployments = [
        {"model": flags.model, "api_base": f"{u}/v1", "name": f"sim{i}"} for i, u in enumerate(urls)
    ]
    return {
        "models": [{"alias": "chat", "strategy": strategy, "deployments": deployments,
                    "num_retries": 0}],
        "router": {"timeouts": {"first_token": 170, "total": 175}},
        "health": {"probe_interval_s": 5.0},
        "server": {"access_log": False},
        "routing": {
            "scrape_interval_s": 0.1,
            "decision_sample_rate": 0.05,
            # The engine speed the cost model assumes: the simulators' own timing flags.
            "kv_aware": {
                "prefill_ms_per_token": flags.prefill_ms_per_token,
                "decode_ms_per_step": flags.decode_ms_per_step,
                "decode_batch_factor": flags.decode_batch_factor,
                "max_num_batched_tokens": flags.max_num_batched_tokens,
                "max_num_seqs": flags.max_num_seqs,
            },
        },
    }  # fmt: skip


def run_router(
    router: str, flags: SimFlags, sims: int, schedule: list[Arrival], args: argparse.Namespace
) -> Result | None:
    with ExitStack() as stack:
        fleet = stack.enter_context(Fleet.start(sims, flags, args.tmp))
        if router == "vllm-router":
            binary = args.vllm_router or shutil.which("vllm-router")
            if binary is None:
                print("vllm-router not found: skipped (pip install vllm-router)", file=sys.stderr)
                return None
            base = stack.enter_context(router_process(binary, fleet.urls, args.tmp))
            urls, headers = [f"{base}/v1/chat/completions"], {}
            body_model = flags.model
        else:
            config = _gateway_config(fleet.urls, router, flags)
            if args.redis:  # replicas share load and prefix records
                config["routing"]["redis_url"] = args.redis
            bases = [stack.enter_context(gateway_process(config, args.tmp, MASTER))
                     for _ in range(args.replicas)]  # fmt: skip
            urls = [f"{b}/v1/chat/completions" for b in bases]
            headers = {"Authorization": f"Bearer {MASTER}"}
            body_model = "chat"
        for a in schedule:
            a.body["model"] = body_model
        before = fleet.prefix_counters()
        ttfts, tokens, errors, makespan = asyncio.run(replay(urls, schedule, headers))
        hits, queries = (a - b for a, b in zip(fleet.prefix_counters(), before, strict=True))
    return Result(
        router=router,
        requests=len(schedule),
        errors=errors,
        ttft_p50=_pct(ttfts, 0.5),
        ttft_p90=_pct(ttfts, 0.9),
        ttft_mean=sum(ttfts) / len(ttfts) if ttfts else float("nan"),
        output_tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
        prefix_hit_rate=hits / queries if queries else 0.0,
        duration_s=makespan,
    )


def _table(results: list[Result]) -> str:
    base = {r.router: r for r in results}
    rr, peer = base.get("round-robin"), base.get("vllm-router")
    lines = ["| router | requests | errors | TTFT p50 s | TTFT p90 s | output tok/s | "
             "prefix hit rate | p90 vs round robin | p90 vs vllm-router |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in results:
        vs_rr = f"{r.ttft_p90 / rr.ttft_p90:.2f}x" if rr else "-"
        vs_peer = f"{r.ttft_p90 / peer.ttft_p90:.2f}x" if peer else "-"
        lines.append(
            f"| {r.router} | {r.requests} | {r.errors} | {r.ttft_p50:.3f} | {r.ttft_p90:.3f} | "
            f"{r.output_tokens_per_s:.0f} | {r.prefix_hit_rate:.1%} | {vs_rr} | {vs_peer} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--routers", default="round-robin,least-load,kv-aware,vllm-router")
    p.add_argument("--sims", type=int, default=6)
    p.add_argument("--no-shared", action="store_true", help="every request has its own prefix")
    p.add_argument("--duration-s", type=float, default=40.0)
    p.add_argument("--rate-start", type=float, default=2.0)
    p.add_argument("--rate-end", type=float, default=14.0)
    p.add_argument("--groups", type=int, default=12)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--prefix-words", type=int, default=1400)
    p.add_argument("--kv-blocks", type=int, default=480)
    p.add_argument("--prefill-ms-per-token", type=float, default=0.25)
    p.add_argument("--decode-ms-per-step", type=float, default=12.0)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--vllm-router", default=None, help="path of the vllm-router binary")
    p.add_argument("--replicas", type=int, default=1,
                   help="fleetgate gateway processes, requests spread round robin")  # fmt: skip
    p.add_argument(
        "--redis",
        default=None,
        help="routing.redis_url of the gateways (share load and prefix records)",
    )
    p.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    p.add_argument("--tmp", type=Path, default=Path("/tmp/fleetgate-bench-routing"))
    args = p.parse_args(argv)
    args.tmp.mkdir(parents=True, exist_ok=True)
    workload = Workload(
        groups=args.groups, users=args.users, prefix_words=args.prefix_words,
        rate_start=args.rate_start, rate_end=args.rate_end, duration_s=args.duration_s,
        shared=not args.no_shared, seed=args.seed,
    )  # fmt: skip
    flags = SimFlags(
        kv_blocks=args.kv_blocks, prefill_ms_per_token=args.prefill_ms_per_token,
        decode_ms_per_step=args.decode_ms_per_step, max_num_seqs=args.max_num_seqs,
        output_len=workload.output_tokens, seed=args.seed,
    )  # fmt: skip
    schedule = build_schedule(workload, flags.model)
    print(f"workload: {asdict(workload)}\nsims: {args.sims} x {asdict(flags)}\n"
          f"requests: {len(schedule)}", flush=True)  # fmt: skip
    results: list[Result] = []
    for router in args.routers.split(","):
        result = run_router(router.strip(), flags, args.sims, schedule, args)
        if result is not None:
            print(json.dumps(asdict(result)), flush=True)
            results.append(result)
    print(_table(results))
    if args.out is not None:
        args.out.write_text(json.dumps(
            {"workload": asdict(workload), "sim": asdict(flags), "sims": args.sims,
             "results": [asdict(r) for r in results]}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
