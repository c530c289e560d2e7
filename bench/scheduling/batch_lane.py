"""A 1,000-line batch on idle capacity beside interactive traffic: interactive TTFT with the
batch against without it, in the same run.

One simulated engine (``--max-num-seqs``, ``--decode-ms`` per step, vLLM's priority policy) and
one ``fleetgate serve`` with the scheduler (pool ``max_num_seqs`` = the engine's,
``priority: true``) and the batch lane (``batches.concurrency``). Team I sends Poisson
interactive traffic (``--rate``): first ``--duration`` seconds alone, then while team T's batch
of ``--lines`` chat lines, created with the official ``openai`` SDK (``files.create``,
``batches.create``), runs to completion (at most ``--max-batch-s``). Reports I's TTFT p50/p95
in both phases and their ratio (target: p95 within 1.1x), the batch's wall time and lines per
second, and checks the output file has every ``custom_id`` exactly once.

    python bench/scheduling/batch_lane.py [--lines 1000] [--duration 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))

from breakdown import breakdown, engine_timings  # noqa: E402
from load import MAX_TOKENS, Sample, pct, stream_one  # noqa: E402

from procs import Engine, Gateway, gateway_process, sim_process  # noqa: E402


def _ttft(samples: list[Sample]) -> dict[str, Any]:
    ok = [s.ttft for s in samples if s.status == 200 and s.ttft is not None]
    return {
        "requests": len(samples),
        "ok": len(ok),
        "ttft_p50_ms": round(pct(ok, 0.5) * 1000, 1),
        "ttft_p95_ms": round(pct(ok, 0.95) * 1000, 1),
    }


def _lines(n: int) -> bytes:
    out = io.BytesIO()
    for i in range(n):
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": f"summarise document number {i}"}],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
        }
        line = {"custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions"}
        out.write(json.dumps({**line, "body": body}).encode() + b"\n")
    return out.getvalue()


def _start_batch(gw: Gateway, key: str, lines: int) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)
    upload = client.files.create(file=("lines.jsonl", _lines(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return client, batch.id


async def _interactive(
    gw: Gateway, key: str, rate: float, until: float, seed: int, stop: asyncio.Event
) -> list[Sample]:
    """Poisson requests until ``until`` or ``stop``; waits for those sent."""
    out: list[Sample] = []
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        next_at = time.monotonic()
        while not stop.is_set():
            next_at += rng.expovariate(rate)
            if next_at >= until:
                break
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if not stop.is_set():
                tasks.append(asyncio.create_task(stream_one(session, gw.url, "I", key, out)))
        await asyncio.gather(*tasks)
    return out


async def run(ns: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    engine = Engine(max_num_seqs=ns.max_num_seqs, decode_ms_per_step=ns.decode_ms)
    batches = {"batches": {"concurrency": ns.concurrency, "tick_s": 0.2}}
    with sim_process(engine, tmp) as sim:
        with gateway_process(sim, engine.max_num_seqs, True, tmp, "lane", batches) as gw:
            _, key_i = gw.team_key("interactive", {"priority": "interactive"})
            _, key_t = gw.team_key("offline")
            never = asyncio.Event()
            alone = await _interactive(gw, key_i, ns.rate, time.monotonic() + ns.duration, 1, never)
            split_alone = breakdown(alone, engine_timings(sim), "I", engine.max_num_seqs)
            client, batch_id = await asyncio.to_thread(_start_batch, gw, key_t, ns.lines)
            started = time.monotonic()
            cap = started + ns.max_batch_s
            stop = asyncio.Event()
            traffic = asyncio.create_task(_interactive(gw, key_i, ns.rate, cap, 2, stop))
            status = "in_progress"
            while time.monotonic() < cap:
                batch = await asyncio.to_thread(client.batches.retrieve, batch_id)
                status = batch.status
                if status in ("completed", "failed", "cancelled", "expired"):
                    break
                await asyncio.sleep(0.5)
            took = time.monotonic() - started
            stop.set()
            if status not in ("completed", "failed", "cancelled", "expired"):
                await asyncio.to_thread(client.batches.cancel, batch_id)
            beside = await traffic
            timings = engine_timings(sim)
            counts = batch.request_counts
            seen: dict[str, int] = {}
            if batch.output_file_id:
                text = (await asyncio.to_thread(client.files.content, batch.output_file_id)).text
                for line in text.splitlines():
                    cid = json.loads(line)["custom_id"]
                    seen[cid] = seen.get(cid, 0) + 1
    # Only the interactive requests sent while the batch ran are "beside" it.
    with_batch = [s for s in beside if s.sent <= started + took]
    a, b = _ttft(alone), _ttft(with_batch)
    split_beside = breakdown(with_batch, timings, "I", engine.max_num_seqs)
    return {
        "lines": ns.lines,
        "batch_status": status,
        "batch_seconds": round(took, 1),
        "lines_per_s": round(ns.lines / took, 1),
        "request_counts": counts.model_dump() if counts is not None else None,
        "output_lines_once": len(seen) == ns.lines and all(v == 1 for v in seen.values()),
        "interactive_alone": a,
        "interactive_with_batch": b,
        "interactive_alone_split": split_alone,
        "interactive_with_batch_split": split_beside,
        "p95_ratio": round(b["ttft_p95_ms"] / a["ttft_p95_ms"], 3),
        "p50_ratio": round(b["ttft_p50_ms"] / a["ttft_p50_ms"], 3),
    }


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--duration", type=float, default=20.0, help="interactive alone, seconds")
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=4, help="batches.concurrency")
    p.add_argument("--max-num-seqs", type=int, default=24)
    p.add_argument("--decode-ms", type=float, default=20.0)
    p.add_argument("--max-batch-s", type=float, default=240.0)
    p.add_argument("--json", type=Path, default=None)
    ns = p.parse_args()
    ns.lines = min(max(ns.lines, 1), 50_000)
    ns.duration = min(max(ns.duration, 2.0), 120.0)
    ns.max_batch_s = min(max(ns.max_batch_s, 5.0), 600.0)
    with tempfile.TemporaryDirectory(prefix="fg-bench-lane-") as tmp:
        result = await run(ns, Path(tmp))
    print(json.dumps(result, indent=2))
    if ns.json is not None:
        ns.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
