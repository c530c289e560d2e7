"""Envoy + ``fleetgate epp`` against Envoy alone and against fleetgate's own relay.

Four ways to serve the same engines, measured in one run on this machine:

- ``floor``: Envoy, round robin over the engines, no picker (nothing of fleetgate's runs);
- ``null-picker``: Envoy + the cheapest grpc.aio picker (``null_picker.py``: the gRPC exchange
  alone, response bodies not sent): what any Python picker pays before doing anything;
- ``epp-headers``: Envoy + ``fleetgate epp``, response bodies not sent to the picker
  (``--response-body none``: output billed at max_tokens);
- ``epp-streamed``: the same with every response chunk streamed to the picker (billed from
  the usage it injected and reads back);
- ``epp-observed``: the response's chunks sent to a second ext_proc filter in observability
  mode instead (one message per chunk, never answered, never waited for; billed from usage);
- ``relay``: ``fleetgate serve``, every byte relayed by fleetgate.

Workloads: ``stream`` (500-token streamed answers) and ``short`` (16-token JSON answers), at 16
and 64 connections, closed loop. For each: requests/s, p50/p99 latency and their difference to
the floor's (the added latency), and the CPU seconds of fleetgate's own processes per 1,000
requests (``/proc/<pid>/stat``). Every figure is the median of ``--rounds`` rounds (five by
default), the four setups interleaved in each round so that drift hits all of them alike.

    python bench/epp/run.py                    # the full run (several minutes)
    python bench/epp/run.py --rounds 1 --requests-scale 0.1   # a smoke run

Timings on a shared box are noisy: read the ratios, and rerun on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tests' process helpers (Envoy's config, started processes)

from tests.epp.envoy import envoy_process  # noqa: E402
from tests.epp.procs import epp_process  # noqa: E402
from tests.procs import free_port, serve_process, sim_process  # noqa: E402

from fleetgate.cli.processes import stop  # noqa: E402

KEY = "sk-bench-epp"
SETUPS = (
    "floor",
    "null-picker",
    "null-observed",
    "epp-headers",
    "base-streamed",
    "epp-streamed",
    "base-observed",
    "epp-observed",
    "relay",
)
WORKLOADS = {  # name: (body fields, requests per run at 16 connections)
    "stream": ({"stream": True, "max_tokens": 500}, 300),
    "short": ({"stream": False, "max_tokens": 16}, 2000),
}


@dataclass
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_per_1k: float | None
    errors: int


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


async def _load(url: str, body: dict[str, Any], connections: int, total: int) -> Result:
    latencies: list[float] = []
    errors = 0
    left = total
    payload = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal left, errors
            while left > 0:  # bounded: ``total`` requests in all
                left -= 1
                started = time.perf_counter()
                try:
                    async with session.post(url, data=payload, headers=headers) as resp:
                        async for _ in resp.content.iter_any():
                            pass
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    n = max(1, len(latencies))
    return Result(
        rps=len(latencies) / elapsed,
        p50_ms=1000 * latencies[n // 2] if latencies else float("nan"),
        p99_ms=1000 * latencies[min(n - 1, int(n * 0.99))] if latencies else float("nan"),
        cpu_per_1k=None,
        errors=errors,
    )


@contextmanager
def _setups(
    tmp: Path, chosen: list[str], baseline: Path | None = None
) -> Iterator[dict[str, tuple[str, list[int]]]]:
    """The setups in ``chosen`` started once: name -> (chat URL, pids of fleetgate's
    processes). ``baseline``: a source tree (its ``src``) the ``base-*`` setups run from."""
    with ExitStack() as stack:
        # one token per 1 ms decode step, each its own event on the wire as a real engine's
        # are (an instant simulator writes many tokens per packet, which flatters a relay)
        sim_args = ("--model", "tiny", "--decode-ms-per-step", "1", "--decode-batch-factor", "0",
                    "--prefill-ms-per-token", "0")  # fmt: skip
        engines = [stack.enter_context(sim_process(*sim_args)) for _ in range(2)]
        hosts = [e.removeprefix("http://").removesuffix("/v1") for e in engines]
        config: dict[str, object] = {"models": [{"alias": "chat", "strategy": "round-robin",
            "deployments": [{"model": "tiny", "api_base": e} for e in engines]}]}  # fmt: skip
        out: dict[str, tuple[str, list[int]]] = {}
        floor = stack.enter_context(envoy_process(tmp, epp_port=None, round_robin_hosts=hosts))
        out["floor"] = (floor, [])
        null_port = free_port()
        script = str(Path(__file__).with_name("null_picker.py"))
        null = subprocess.Popen([sys.executable, script, "--port", str(null_port),
                                 "--endpoints", ",".join(hosts)])  # fmt: skip
        stack.callback(stop, null)
        time.sleep(2.0)  # grpc.aio is listening well within this
        envoy = stack.enter_context(envoy_process(tmp, epp_port=null_port, response_body="none"))
        out["null-picker"] = (envoy, [null.pid])
        # the same picker with the response's chunks sent to an observing filter: what
        # receiving them over grpc.aio costs before fleetgate reads any of them
        envoy = stack.enter_context(envoy_process(tmp, epp_port=null_port,
                                                  response_body="observed"))  # fmt: skip
        out["null-observed"] = (envoy, [null.pid])
        modes = (("epp-headers", "none"), ("epp-streamed", "streamed"),
                 ("epp-observed", "observed"), ("base-streamed", "streamed"),
                 ("base-observed", "observed"))  # fmt: skip
        for name, mode in modes:
            if name not in chosen:
                continue
            env = None
            if name.startswith("base-"):
                assert baseline is not None
                env = {"PYTHONPATH": str(baseline / "src")}
            epp = stack.enter_context(epp_process(config, tmp, master_key=KEY, env=env,
                                                  args=("--response-body", mode)))  # fmt: skip
            envoy = stack.enter_context(
                envoy_process(tmp, epp_port=epp.grpc_port, response_body=mode)
            )
            out[name] = (envoy, [epp.proc.pid])
        relay, proc = stack.enter_context(serve_process(config, tmp, master_key=KEY))
        out["relay"] = (relay, [proc.pid])
        yield {k: (f"{base}/v1/chat/completions", pids) for k, (base, pids) in out.items()}


def _measure(url: str, pids: list[int], body: dict[str, Any], conns: int, n: int) -> Result:
    before = sum(_cpu_s(p) for p in pids)
    result = asyncio.run(_load(url, body, conns, n))
    if pids:
        used = sum(_cpu_s(p) for p in pids) - before
        result.cpu_per_1k = 1000 * used / max(1, n - result.errors)
    return result


def _median(results: list[Result]) -> Result:
    cpu = [r.cpu_per_1k for r in results if r.cpu_per_1k is not None]
    return Result(
        rps=statistics.median(r.rps for r in results),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        cpu_per_1k=statistics.median(cpu) if cpu else None,
        errors=sum(r.errors for r in results),
    )


def main() -> None:
    # a SIGTERM ends the run through the ExitStack: every process it started is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", default="16,64")
    parser.add_argument("--requests-scale", type=float, default=1.0)
    parser.add_argument("--workloads", default="stream,short")
    parser.add_argument("--output-json", type=Path, default=None)
    default = ",".join(s for s in SETUPS if not s.startswith("base-"))
    parser.add_argument("--setups", default=default, help="a subset, in this order")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a checkout of the code to compare with (e.g. `git archive` of "
                        "the previous commit): adds base-streamed and base-observed, fleetgate "
                        "epp run from its src")  # fmt: skip
    args = parser.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    picked = args.setups.split(",")
    if args.baseline_src is not None:
        picked += ["base-streamed", "base-observed"]
    chosen = [s for s in SETUPS if s in picked]
    if "floor" not in chosen or "relay" not in chosen:
        parser.error("--setups must include floor and relay (the baselines)")
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-epp-") as tmp,
        _setups(Path(tmp), chosen, args.baseline_src) as setups,
    ):
        for workload in args.workloads.split(","):
            fields, base_n = WORKLOADS[workload]
            body = {"model": "chat", "messages": [{"role": "user", "content": "hello"}],
                    **fields}  # fmt: skip
            for c in conns:
                n = max(c, int(base_n * args.requests_scale * max(1, c // 16) ** 0.5))
                runs: dict[str, list[Result]] = {s: [] for s in chosen}
                for _ in range(args.rounds):
                    for setup in chosen:
                        url, pids = setups[setup]
                        # no alias rewrite without fleetgate: these are sent the engine's name
                        raw = setup in ("floor", "null-picker", "null-observed")
                        sent = {**body, "model": "tiny"} if raw else body
                        runs[setup].append(_measure(url, pids, sent, c, n))
                floor = _median(runs["floor"])
                relay_cpu = _median(runs["relay"]).cpu_per_1k
                for setup in chosen:
                    m = _median(runs[setup])
                    row = {
                        "workload": workload, "connections": c, "setup": setup,
                        "requests": n, "rps": round(m.rps, 1),
                        "p50_ms": round(m.p50_ms, 2), "p99_ms": round(m.p99_ms, 2),
                        "added_p50_ms": round(m.p50_ms - floor.p50_ms, 2),
                        "added_p99_ms": round(m.p99_ms - floor.p99_ms, 2),
                        "cpu_s_per_1k": None if m.cpu_per_1k is None else round(m.cpu_per_1k, 2),
                        "cpu_vs_relay": None if m.cpu_per_1k is None or not relay_cpu
                        else round(m.cpu_per_1k / relay_cpu, 3),
                        "errors": m.errors,
                    }  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.output_json is not None:
        args.output_json.write_text(json.dumps(rows, indent=2))
    _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    print("\n| workload | conns | setup | req/s | p50 ms | p99 ms | +p50 ms | +p99 ms "
          "| CPU s/1k req | CPU vs relay |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['connections']} | {r['setup']} | {r['rps']} "
              f"| {r['p50_ms']} | {r['p99_ms']} | {r['added_p50_ms']} | {r['added_p99_ms']} "
              f"| {r['cpu_s_per_1k'] if r['cpu_s_per_1k'] is not None else '-'} "
              f"| {r['cpu_vs_relay'] if r['cpu_vs_relay'] is not None else '-'} |")  # fmt: skip


if __name__ == "__main__":
    main()
