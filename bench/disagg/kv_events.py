"""kv-aware routing from engines' KV events vs from the gateway's own index: predicted prefix
hits against the hits the engines report.

A fleet of ``fleetgate sim`` processes publishing KV events (vLLM's ``--kv-events-config``), and
a ``fleetgate serve`` gateway with one kv-aware alias over them, in three modes (a fresh fleet
each, cold caches, the same request sequence):

- ``events``: the deployments have ``kv_events``: the scorer uses the engines' reported blocks;
- ``gateway-exact``: no events, the gateway's own index over exact token ids (``exact_tokenize``);
- ``gateway-text``: no events, the gateway's default index over prompt text.

Workload: ``--docs`` documents of ~``--doc-tokens`` tokens, picked Zipf(1.1), each request one
document as the system message and a unique question; the fleet holds about ``--fit`` of the
documents at once, so engines evict. Between them, ``--direct-share`` of the requests go
straight to a random engine with other documents: another gateway replica's traffic, which this
gateway's index never sees (replicas without a shared Redis index) but the events report.
Requests go one at a time so the decision log (the prediction) and the responses
(``usage.prompt_tokens_details.cached_tokens``: what the engine found cached) pair up in order.
Reported per mode: the fleet's prefix hit rate, predicted / reported hit tokens, and the mean
absolute per-request error of the prediction relative to the
mean reported hit. Median of ``--runs`` runs.

    python bench/disagg/kv_events.py [--runs 5] [--requests 160] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MASTER, gateway_process, sim_fleet, write_section  # noqa: E402

BLOCK = 16


def _docs(n: int, tokens: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = max(8, tokens // 2)  # the simulator's tokenizer: about 2 tokens a word here
    return [" ".join(f"d{d}w{rng.randrange(10_000)}" for _ in range(words)) for d in range(n)]


def _sequence(args: argparse.Namespace) -> list[int]:
    rng = random.Random(args.seed)
    weights = [1.0 / (d + 1) ** 1.1 for d in range(args.docs)]
    return rng.choices(range(args.docs), weights, k=args.requests)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {MASTER}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return dict(json.loads(resp.read()))


def _get(url: str) -> dict[str, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {MASTER}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def one_run(mode: str, args: argparse.Namespace, tmp: Path, run: int) -> dict[str, float]:
    docs = _docs(args.docs, args.doc_tokens, args.seed)
    others = _docs(args.docs, args.doc_tokens, args.seed + 1000)
    blocks = int(args.fit * args.docs * (args.doc_tokens + 64) / BLOCK / args.engines)
    with ExitStack() as stack:
        fleet = stack.enter_context(
            sim_fleet(args.engines, tmp, kv_blocks=blocks, events=True, seed=run)
        )
        deployments = []
        for i, sim in enumerate(fleet):
            dep: dict[str, Any] = {"model": "tiny", "api_base": f"{sim.url}/v1", "name": f"sim{i}"}
            if mode == "events":
                dep["kv_events"] = {"endpoint": sim.events, "replay_endpoint": sim.replay}
            deployments.append(dep)
        config = {
            "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": deployments}],
            "server": {"access_log": False},
            "routing": {"scrape_interval_s": 0.1, "tenant_isolation": False,
                        "kv_aware": {"exact_tokenize": mode != "gateway-text",
                                     "index_block_tokens": BLOCK}},
        }  # fmt: skip
        base = stack.enter_context(gateway_process(config, tmp, MASTER))
        predicted: list[int] = []
        reported: list[int] = []
        prompt = 0
        rng = random.Random(args.seed + run)
        for i, d in enumerate(_sequence(args)):
            if rng.random() < args.direct_share:
                # Another gateway replica's traffic (no shared index): straight to an engine.
                sim = rng.choice(fleet)
                other = others[rng.randrange(len(others))]
                _post(f"{sim.url}/v1/chat/completions", {"model": "tiny", "max_tokens": 4,
                      "messages": [{"role": "system", "content": other},
                                   {"role": "user", "content": f"other {i}"}]})  # fmt: skip
            body = {"model": "chat", "max_tokens": 4, "messages": [
                {"role": "system", "content": docs[d]},
                {"role": "user", "content": f"question {i} about document {d}?"}]}  # fmt: skip
            usage = _post(f"{base}/v1/chat/completions", body)["usage"]
            reported.append(int(usage["prompt_tokens_details"]["cached_tokens"]))
            prompt += int(usage["prompt_tokens"])
            decision = _get(f"{base}/admin/routing/decisions?alias=chat&limit=1")["data"][0]
            predicted.append(int(decision["cached_tokens"]))
            if args.verbose and predicted[-1] != reported[-1]:
                print(
                    mode,
                    i,
                    d,
                    decision["picked"],
                    predicted[-1],
                    reported[-1],
                    usage["prompt_tokens"],
                    flush=True,
                )
    hits = sum(reported)
    err = sum(abs(p - r) for p, r in zip(predicted, reported, strict=True))
    return {
        "hit_rate": hits / prompt,
        "predicted_over_reported": sum(predicted) / max(1, hits),
        "abs_error": err / max(1, hits),
        "exact_share": sum(p == r for p, r in zip(predicted, reported, strict=True))
        / len(reported),
    }


def _table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.engines} simulated engines, {args.docs} documents of ~{args.doc_tokens} tokens "
        f"(Zipf 1.1), the fleet's KV holds ~{args.fit:.0%} of them; {args.requests} requests "
        f"one at a time, {args.direct_share:.0%} of them straight to an engine (another "
        f"replica's traffic, not scored); median of {args.runs} runs (fresh fleet each).",
        "",
        "| index used by kv-aware | fleet prefix hit rate | predicted / reported hit tokens "
        "| mean abs error / reported | requests predicted exactly |",
        "|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        lines.append(
            f"| {mode} | {r['hit_rate']:.1%} | {r['predicted_over_reported']:.3f} "
            f"| {r['abs_error']:.1%} | {r['exact_share']:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=160)
    p.add_argument("--engines", type=int, default=3)
    p.add_argument("--docs", type=int, default=12)
    p.add_argument("--doc-tokens", type=int, default=800)
    p.add_argument("--fit", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument(
        "--direct-share",
        type=float,
        default=0.3,
        help="requests sent straight to an engine (another replica's traffic)",
    )
    p.add_argument("--modes", default="events,gateway-exact,gateway-text")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print mispredicted requests")
    args = p.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            runs = [one_run(mode, args, Path(tmp), r) for r in range(args.runs)]
            results[mode] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(mode, results[mode], flush=True)
    table = _table(results, args)
    print(table)
    if args.write_docs:
        write_section("KV events: predicted vs reported prefix hits", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
