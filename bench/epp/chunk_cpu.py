"""The picker's own CPU per response body chunk, in process (no gRPC, no Envoy).

A 500-token streamed answer as ``fleetgate sim`` writes it (one event per token, each with the
``"usage":null`` of a stream that asked for its usage, then the usage event and ``[DONE]``),
sent as ext_proc messages through ``ExternalProcessor.Process`` to an exchange that has picked
and seen the response headers: ``streamed`` (each chunk answered, the injected usage taken
out) and ``observed`` (the observing filter's messages, never answered). Reported: microseconds
of this thread's CPU per chunk, the best of ``--rounds``, and the meter alone. With
``--baseline-src DIR`` the same is measured on the code in ``DIR/src`` in a child process, in
the same run, and the ratio printed.

    python bench/epp/chunk_cpu.py --baseline-src /tmp/base   # /tmp/base: git archive HEAD~1 src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

TOKENS = 500


def _chunks() -> list[bytes]:
    head = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny",'
    token = head + b'"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}],'
    token += b'"usage":null}\n\n'
    usage = head + b'"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":500}}\n\n'
    return [token] * TOKENS + [usage, b"data: [DONE]\n\n"]


def _measure(rounds: int) -> dict[str, float]:
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

    from fleetgate.contract.request import GatewayRequest, Outcome
    from fleetgate.epp.exchange import EppOptions, Exchange
    from fleetgate.epp.meter import ResponseMeter
    from fleetgate.epp.server import ExternalProcessor

    chunks = _chunks()
    out: dict[str, float] = {}
    for mode in ("streamed", "observed"):
        observed = mode == "observed"
        msgs = []
        for i, data in enumerate(chunks):
            msg = ext_proc.ProcessingRequest(observability_mode=observed)
            msg.response_body.body = data
            msg.response_body.end_of_stream = i == len(chunks) - 1
            msgs.append(msg)
        best = float("inf")
        for _ in range(rounds):
            opts = EppOptions(response_body=mode)
            target = Exchange(None, None, opts, record=lambda _r: None)  # type: ignore[arg-type]
            target._meter = ResponseMeter(Outcome(), stream=True, strip_usage=not observed)
            target._req = GatewayRequest.__new__(GatewayRequest)  # only read at the end
            target.done = True  # nothing to settle: the chunks are what is measured
            reader = target
            if observed:
                reader = Exchange(None, None, opts, record=lambda _r: None)  # type: ignore[arg-type]
                reader._observed = target

            async def feed(items: list[Any] = msgs) -> AsyncIterator[Any]:
                for m in items:
                    yield m

            async def drive(reader: Exchange = reader) -> None:
                async for reply in ExternalProcessor(lambda: reader).Process(feed(), None):
                    reply.SerializeToString()  # as grpc does with each reply

            started = time.thread_time()
            asyncio.run(drive())
            best = min(best, (time.thread_time() - started) / len(msgs) * 1e6)
        out[f"{mode}_us_per_chunk"] = round(best, 3)
    meter_best = float("inf")
    for _ in range(rounds):
        meter = ResponseMeter(Outcome(), stream=True, strip_usage=True)
        started = time.thread_time()
        for i, data in enumerate(chunks):
            meter.feed(data, i == len(chunks) - 1)
        meter_best = min(meter_best, (time.thread_time() - started) / len(chunks) * 1e6)
    out["meter_us_per_chunk"] = round(meter_best, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print this code's figures only")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(_measure(args.rounds)))
        return
    rows = {"this": _measure(args.rounds)}
    if args.baseline_src is not None:
        env = {**os.environ, "PYTHONPATH": str(args.baseline_src / "src")}
        cmd = [sys.executable, __file__, "--json", "--rounds", str(args.rounds)]
        done = subprocess.run(cmd, env=env, capture_output=True, check=True, timeout=600)
        rows["baseline"] = json.loads(done.stdout)
        rows["this"] = _measure(args.rounds)  # again after it: drift hits both
    print(f"load average {os.getloadavg()[0]:.1f}")
    for name, row in rows.items():
        print(name, json.dumps(row))
    if "baseline" in rows:
        ratios = {k: round(rows["this"][k] / rows["baseline"][k], 2) for k in rows["this"]}
        print("this / baseline", json.dumps(ratios))


if __name__ == "__main__":
    main()
