"""Cost of the Responses API bridge: ``/v1/responses`` against ``/v1/chat/completions``.

One gateway (SQLite store unless ``--database-url``, tenancy on, the master key) in front of
the instant simulator (echo mode: the answer repeats the prompt), in this process. Each round
sends one request of every mode, one at a time and in a new random order each round (a mode
is not always the one after a database write), so all modes see the same machine state:

- ``chat`` / ``chat-stream``: the baseline, ``/v1/chat/completions``;
- ``resp`` / ``resp-stream``: ``/v1/responses`` with ``store: false`` (translation only);
- ``resp-store``: ``store: true`` (one insert per request);
- ``resp-continue``: ``store: true`` and ``previous_response_id`` of a stored one-turn
  response (one recursive read and one insert per request).

Prints, per mode, the client-seen p50 latency of each run and the median over the runs, and
the median added p50 against the chat request of the same kind (stream or not).

    PYTHONPATH=src:. python bench/responses/run.py --runs 5 --requests 200
    PYTHONPATH=src:. python bench/responses/run.py --database-url postgresql://...
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.http.serving import served
from fleetgate.sim import SimConfig, running_sim

MASTER = "sk-bench-master"
PROMPT = "Summarise the release notes of the last deployment in one short sentence."
BASELINE = {
    "chat": "chat", "chat-stream": "chat-stream", "resp": "chat", "resp-stream": "chat-stream",
    "resp-store": "chat", "resp-continue": "chat",
}  # fmt: skip


def _config(sim: str) -> GatewayConfig:
    dep = {"provider": "openai", "model": "tiny", "api_base": f"{sim}/v1"}
    return GatewayConfig.model_validate(
        {
            "models": [{"alias": "tiny", "deployments": [dep]}],
            "multimodal": {"enabled": False},
            "health": {"probe_interval_s": 30},
        }
    )


Send = Callable[[], Awaitable[None]]


def _senders(session: aiohttp.ClientSession, url: str, root: str) -> dict[str, Send]:
    headers = {"Authorization": f"Bearer {MASTER}"}

    async def post(path: str, body: dict[str, Any]) -> None:
        async with session.post(url + path, json=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()

    chat = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}
    resp = {"model": "tiny", "input": PROMPT, "max_output_tokens": 16}
    return {
        "chat": lambda: post("/v1/chat/completions", chat),
        "chat-stream": lambda: post("/v1/chat/completions", {**chat, "stream": True}),
        "resp": lambda: post("/v1/responses", {**resp, "store": False}),
        "resp-stream": lambda: post("/v1/responses", {**resp, "store": False, "stream": True}),
        "resp-store": lambda: post("/v1/responses", resp),
        "resp-continue": lambda: post("/v1/responses", {**resp, "previous_response_id": root}),
    }


async def one_run(requests: int, database_url: str | None) -> dict[str, float]:
    """p50 client latency (ms) per mode over ``requests`` rounds."""
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(
            master_key=MASTER, data_dir=Path(data), database_url=database_url,
            watch_config=False,
        )  # fmt: skip
        async with running_sim(SimConfig(mode="echo")) as sim:
            app = create_app(settings, _config(sim))
            async with served(app) as url, aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {MASTER}"}
                async with session.post(
                    url + "/v1/responses", json={"model": "tiny", "input": PROMPT},
                    headers=headers,
                ) as r:  # fmt: skip
                    root = (await r.json())["id"]
                senders = _senders(session, url, root)
                for send in senders.values():  # warm up every path (and the store)
                    for _ in range(10):
                        await send()
                times: dict[str, list[float]] = {m: [] for m in senders}
                modes = list(senders.items())
                rng = random.Random(0)
                for _ in range(requests):
                    rng.shuffle(modes)
                    for mode, send in modes:
                        t0 = time.perf_counter()
                        await send()
                        times[mode].append((time.perf_counter() - t0) * 1000)
    return {m: statistics.median(xs) for m, xs in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    args = parser.parse_args()
    runs = [await one_run(args.requests, args.database_url) for _ in range(args.runs)]
    store = args.database_url.split("://")[0] if args.database_url else "sqlite"
    print(f"{args.runs} runs x {args.requests} requests per mode, store {store}; "
          "p50 client latency (ms)")  # fmt: skip
    print(f"{'mode':14} {'runs':44} {'median':>8} {'added':>8} {'ratio':>6}")
    for mode in runs[0]:
        per_run = [r[mode] for r in runs]
        base = statistics.median(r[BASELINE[mode]] for r in runs)
        med = statistics.median(per_run)
        added = statistics.median(r[mode] - r[BASELINE[mode]] for r in runs)
        cells = " ".join(f"{x:7.3f}" for x in per_run)
        print(f"{mode:14} {cells:44} {med:8.3f} {added:+8.3f} {med / base:6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
