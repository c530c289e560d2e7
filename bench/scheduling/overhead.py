"""What the scheduler adds to a request below saturation, end to end, against scheduling off.

One simulated engine (``--decode-ms`` per step, 4 output tokens) and one ``fleetgate serve``
whose pool has room for all (``max_num_seqs: 256``); each round sends ``--n`` streamed
requests one after another with ``scheduling.enabled: true`` and then ``false`` (a config
reload of the same process between them, so both see the same box), and takes each one's
p50 latency (request sent to stream end). Five rounds; the medians of the five p50s, their
difference in ms and ratio. Target (issue #14): at most 0.05 ms p50 added.

    python bench/scheduling/overhead.py [--n 400] [--rounds 5]
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

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procs import Engine, gateway_process, sim_process  # noqa: E402


async def _round(url: str, key: str, n: int) -> float:
    """p50 seconds of ``n`` sequential streamed requests."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hello there, how are you today"}],
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    took: list[float] = []
    async with aiohttp.ClientSession() as session:
        for _ in range(20):  # warm the connection and the caches
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
        for _ in range(n):
            started = time.perf_counter()
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status
            took.append(time.perf_counter() - started)
    return statistics.median(took)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--decode-ms", type=float, default=1.0)
    p.add_argument("--json", type=Path, default=None)
    ns = p.parse_args()
    n, rounds = min(max(ns.n, 50), 5000), min(max(ns.rounds, 1), 10)
    engine = Engine(max_num_seqs=256, decode_ms_per_step=ns.decode_ms, prefill_ms_per_token=0.0,
                    output_len=4)  # fmt: skip
    p50s: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="fg-bench-sched-oh-") as tmp:
        with sim_process(engine, Path(tmp)) as sim:
            with gateway_process(sim, 256, True, Path(tmp), "overhead") as gw:
                team, key = gw.team_key("t", {"priority": "interactive"})
                for i in range(rounds):
                    for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
                        gw.apply({"enabled": mode == "on", "teams": {team: {"weight": 2}}})
                        await asyncio.sleep(0.3)
                        p50s[mode].append(await _round(gw.url, key, n))
                        print(f"round {i} {mode}: p50 {p50s[mode][-1] * 1000:.3f} ms", flush=True)
    on, off = statistics.median(p50s["on"]), statistics.median(p50s["off"])
    result = {
        "requests_per_round": n,
        "rounds": rounds,
        "p50_ms_on": [round(x * 1000, 4) for x in p50s["on"]],
        "p50_ms_off": [round(x * 1000, 4) for x in p50s["off"]],
        "median_p50_ms_on": round(on * 1000, 4),
        "median_p50_ms_off": round(off * 1000, 4),
        "added_ms": round((on - off) * 1000, 4),
        "ratio": round(on / off, 4),
    }
    print(json.dumps(result, indent=2))
    if ns.json is not None:
        ns.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
