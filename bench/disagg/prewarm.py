"""KV prewarm: the first request on a new document vs a warm one, prewarm off vs on.

A kv-aware alias over ``--engines`` simulated engines (prefill ``--prefill-ms`` per token). Per
run a new document of ``--doc-tokens`` tokens; *off*: the first request with it as the system
prompt (cold: the whole document is prefilled), then a second one with another question
(warm); *on*: ``POST /admin/routing/prewarm`` with the document first (what a document upload
would trigger), then the same two requests. Reported: the first request's TTFT over the warm
one's, median of ``--runs`` runs; the issue's target is within 1.2x with prewarm on.

    python bench/disagg/prewarm.py [--runs 5] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MASTER, gateway_process, sim_fleet, write_section  # noqa: E402
from pd import _one  # noqa: E402


def _admin(base: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base}/admin/routing/prewarm", json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {MASTER}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as resp:
        return dict(json.loads(resp.read()))


async def _ttft(base: str, doc: str, question: str) -> float:
    body = {"model": "chat", "stream": True, "max_tokens": 2, "ignore_eos": True,
            "messages": [{"role": "system", "content": doc},
                         {"role": "user", "content": question}]}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        ttft, _ = await _one(http, f"{base}/v1/chat/completions", body)
    assert ttft is not None
    return ttft


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--doc-tokens", type=int, default=8000)
    p.add_argument("--prefill-ms", type=float, default=0.1)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    rng = random.Random(5)
    ratios: dict[str, list[float]] = {"off": [], "on": []}
    firsts: dict[str, list[float]] = {"off": [], "on": []}
    timing = ("--prefill-ms-per-token", str(args.prefill_ms), "--decode-ms-per-step", "5",
              "--max-model-len", "65536", "--max-num-batched-tokens", "2048")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        sims = stack.enter_context(
            sim_fleet(args.engines, Path(tmp), kv_blocks=8192, events=False, extra=timing)
        )
        deployments = [{"model": "tiny", "api_base": f"{s.url}/v1", "name": f"e{i}"}
                       for i, s in enumerate(sims)]  # fmt: skip
        config = {"models": [{"alias": "chat", "strategy": "kv-aware", "deployments": deployments}],
                  "server": {"access_log": False},
                  "routing": {"tenant_isolation": False, "scrape_interval_s": 0.1,
                              "kv_aware": {"prefill_ms_per_token": args.prefill_ms}}}  # fmt: skip
        base = stack.enter_context(gateway_process(config, Path(tmp), MASTER))
        for run in range(args.runs):
            for mode in ("off", "on"):
                words = " ".join(f"{mode}{run}w{rng.randrange(10_000)}"
                                 for _ in range(args.doc_tokens // 2))  # fmt: skip
                doc = f"Document {mode}-{run}. {words}"
                if mode == "on":
                    _admin(base, {"alias": "chat", "replicas": 1,
                                  "messages": [{"role": "system", "content": doc}]})  # fmt: skip
                first = asyncio.run(_ttft(base, doc, "first question?"))
                warm = asyncio.run(_ttft(base, doc, "second question?"))
                ratios[mode].append(first / warm)
                firsts[mode].append(first)
    off, on = statistics.median(ratios["off"]), statistics.median(ratios["on"])
    table = "\n".join([
        f"{args.engines} simulated engines, kv-aware; a new document of ~{args.doc_tokens} tokens "
        f"per run, prefill {args.prefill_ms} ms/token; median of {args.runs} runs.",
        "",
        "| prewarm | first request TTFT | first / warm TTFT |",
        "|---|---|---|",
        f"| off (baseline) | {statistics.median(firsts['off']) * 1000:.0f} ms | {off:.2f}x |",
        f"| on | {statistics.median(firsts['on']) * 1000:.0f} ms | {on:.2f}x |",
    ])  # fmt: skip
    print(table)
    if args.write_docs:
        write_section("KV prewarm of a document", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
