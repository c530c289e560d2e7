"""Streaming moderation cost at the client: inter-token latency with and without the checks.

Starts ``fleetgate sim`` (echo mode, a realistic decode pace) and one ``fleetgate serve`` in
front of it with three aliases on the same engine:

- ``plain``: no stream checks (the byte relay, as without a ``safety:`` section),
- ``mod``: the built-in word + PII checks on the stream, hold-back off,
- ``hold``: the same checks with hold-back on (text released only after a check covered it).

Each round sends ``--streams`` concurrent streams of every alias at once (so all three share
the engine's batches and pace) and measures, per alias, the ``vllm bench serve`` metrics at the
client: ITL (gap between content chunks), TPOT ((e2e - ttft) / (tokens - 1)), TTFT and E2E.
It prints the medians over ``--runs`` rounds and the differences against ``plain``.

    python bench/safety/stream_itl.py --runs 5 --streams 4 --decode-ms 15

Target: ``mod`` adds <= 1 ms to p50 ITL. With hold-back the chunks come in bursts (one per
check), so its ITL is not comparable; its cost is the E2E difference, and the price of
hold-back itself is the TTFT difference (about ``interval_tokens`` decode steps, by design).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.sse import SSEParser

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.procs import serve_process, sim_process  # noqa: E402

MASTER = "sk-bench-safety"
MODES = ("plain", "mod", "hold")
TEXT = (
    "The deployment finished and every replica reports healthy, so the team can move on to "
    "the next release. 部署已经完成，所有副本都正常，团队可以开始下一个版本。 Please send the "
    "summary to the channel and keep the dashboard open for the rest of the afternoon. "
) * 3


def _config(sim_url: str) -> dict[str, Any]:
    dep = [{"provider": "openai", "model": "tiny", "api_base": sim_url}]
    stream = ["words", "pii"]
    return {
        "models": [{"alias": m, "deployments": dep} for m in MODES],
        "server": {"access_log": False},
        "multimodal": {"enabled": False},
        "tenancy": {"enabled": False},
        "health": {"probe_interval_s": 60},
        "safety": {
            "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
            "policies": {
                "default": {},
                "mod": {"stream": stream, "stream_options": {"hold_back": False}},
                "hold": {"stream": stream, "stream_options": {"hold_back": True}},
            },
            "aliases": {"mod": "mod", "hold": "hold"},
            "audit": {"enabled": False},
        },
    }


async def one_stream(session: aiohttp.ClientSession, url: str, alias: str) -> dict[str, Any]:
    body = {"model": alias, "stream": True, "max_tokens": 400,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": TEXT}]}  # fmt: skip
    start = time.perf_counter()
    arrivals: list[float] = []
    tokens = 0
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        parser = SSEParser()
        async for raw in resp.content.iter_any():
            now = time.perf_counter()
            for _, text in parser.feed(raw):
                if not text.startswith("{"):
                    continue
                chunk = json.loads(text)
                if chunk.get("usage"):
                    tokens = int(chunk["usage"]["completion_tokens"])
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        arrivals.append(now)
    itl = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    ttft, e2e = arrivals[0] - start, arrivals[-1] - start
    return {"itl": itl, "ttft": ttft, "e2e": e2e, "tpot": (e2e - ttft) / max(1, tokens - 1)}


async def one_round(base_url: str, streams: int) -> dict[str, dict[str, float]]:
    url = base_url + "/v1/chat/completions"
    headers = {"Authorization": f"Bearer {MASTER}"}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        jobs = [(m, one_stream(session, url, m)) for _ in range(streams) for m in MODES]
        results = await asyncio.gather(*(j for _, j in jobs))
    out: dict[str, dict[str, float]] = {}
    for mode in MODES:
        mine = [r for (m, _), r in zip(jobs, results, strict=True) if m == mode]
        out[mode] = {
            "itl": statistics.median([x for r in mine for x in r["itl"]]),
            "tpot": statistics.median(r["tpot"] for r in mine),
            "ttft": statistics.median(r["ttft"] for r in mine),
            "e2e": statistics.median(r["e2e"] for r in mine),
        }
    return out


def report(rounds: list[dict[str, dict[str, float]]]) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[mode][key] for r in rounds) * 1000

    print(f"\nmedians over {len(rounds)} runs (ms)")
    print(f"{'alias':6} {'p50 ITL':>9} {'p50 TPOT':>9} {'p50 TTFT':>9} {'p50 E2E':>9}")
    for mode in MODES:
        print(f"{mode:6} {med(mode, 'itl'):9.3f} {med(mode, 'tpot'):9.3f} "
              f"{med(mode, 'ttft'):9.3f} {med(mode, 'e2e'):9.3f}")  # fmt: skip
    per_run = [1000 * (r["mod"]["itl"] - r["plain"]["itl"]) for r in rounds]
    print(f"\nmod  - plain: p50 ITL {med('mod', 'itl') - med('plain', 'itl'):+.3f} ms "
          f"(per run: {', '.join(f'{d:+.3f}' for d in per_run)})")  # fmt: skip
    print(f"mod  - plain: p50 TPOT {med('mod', 'tpot') - med('plain', 'tpot'):+.3f} ms")
    print(
        f"hold - plain: p50 TPOT {med('hold', 'tpot') - med('plain', 'tpot'):+.3f} ms, "
        f"p50 E2E {med('hold', 'e2e') - med('plain', 'e2e'):+.3f} ms, "
        f"p50 TTFT {med('hold', 'ttft') - med('plain', 'ttft'):+.3f} ms (hold-back wait)"
    )


async def run(base_url: str, runs: int, streams: int) -> None:
    await one_round(base_url, 1)  # warm-up: connections, code paths
    rounds = []
    for i in range(runs):
        rounds.append(await one_round(base_url, streams))
        r = rounds[-1]
        print(f"run {i + 1}: " + "  ".join(
            f"{m} itl {r[m]['itl'] * 1000:.3f} ms" for m in MODES))  # fmt: skip
    report(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams per alias")
    parser.add_argument("--decode-ms", type=float, default=15.0, help="sim decode ms per step")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        sim_process("--mode", "echo", "--decode-ms-per-step", str(args.decode_ms)) as sim_url,
        serve_process(_config(sim_url), Path(tmp), master_key=MASTER) as (base_url, _),
    ):
        print(f"sim {sim_url} (decode {args.decode_ms} ms/step), gateway {base_url}")
        asyncio.run(run(base_url, args.runs, args.streams))


if __name__ == "__main__":
    main()
