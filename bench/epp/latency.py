"""The latency the picker adds to a request, on a box too busy for ``run.py``'s latency columns.

``run.py`` measures throughput and CPU under load (16 and 64 connections); there every setup's
latency is the cores' queue. This script measures what the picker adds to one request at a
time (one connection, closed loop), in three ways, every setup interleaved in each round:

- **client p50**: the client's latency, against Envoy alone (the floor);
- **Envoy's wait**: how long Envoy itself waited for the picker on the request's path, from its
  access log (ext_proc's per-step latencies: request headers + request body, and the response
  headers when the picker is sent them): the picker's share, measured where it is paid;
- **picker CPU**: the picker process's CPU seconds per request (``/proc``): what it costs on a
  core of its own, where its wall time is its CPU time.

Setups: ``floor`` (Envoy, round robin), ``null-picker`` (the gRPC exchange alone),
``null-grpclib`` (the same on grpclib, gRPC in pure Python without the C core; only with
``--grpclib-path``, where ``pip install --target`` put it), ``epp-headers`` (``fleetgate epp
--response-body none``: Envoy waits for the response headers too) and ``epp-observed``
(``--response-body observed``: the response goes to an observing filter Envoy never waits for).
``--nice``: every process of the run at this niceness (root only), so
the machine's other work yields to it (its session's autogroup too); ``--pin``: the picker on
CPU 1, Envoy, the engine and the client on CPU 0.

    python bench/epp/latency.py --nice -10 --pin
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from run import KEY, _cpu_s, _load  # the throughput run's load loop and CPU reader
from tests.epp.envoy import envoy_process
from tests.epp.procs import epp_process
from tests.procs import free_port, sim_process

from fleetgate.cli.processes import stop

SETUPS = ("floor", "null-picker", "epp-headers", "epp-observed")


@contextmanager
def _on(cpus: set[int] | None) -> Iterator[None]:
    """Processes started inside run on ``cpus`` (None: wherever)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def _setups(
    tmp: Path, pin: bool, grpclib: str | None
) -> Iterator[dict[str, tuple[str, list[int], Path | None]]]:
    """name -> (chat URL, the picker's pids, Envoy's access log)."""
    main, side = ({0}, {1}) if pin else (None, None)
    with ExitStack() as stack, _on(main):
        sim = stack.enter_context(sim_process("--model", "tiny", "--decode-ms-per-step", "1",
                                              "--decode-batch-factor", "0",
                                              "--prefill-ms-per-token", "0"))  # fmt: skip
        host = sim.removeprefix("http://").removesuffix("/v1")
        config = {"models": [{"alias": "chat", "deployments": [
            {"model": "tiny", "api_base": sim}]}]}  # fmt: skip
        out: dict[str, tuple[str, list[int], Path | None]] = {}
        floor = stack.enter_context(envoy_process(tmp, epp_port=None, round_robin_hosts=[host]))
        out["floor"] = (floor, [], None)
        null_port = free_port()
        with _on(side):
            null = subprocess.Popen([sys.executable, str(Path(__file__).with_name(
                "null_picker.py")), "--port", str(null_port), "--endpoints", host])  # fmt: skip
        stack.callback(stop, null)
        time.sleep(2.0)  # grpc.aio is listening well within this
        log = tmp / "null.log"
        envoy = stack.enter_context(envoy_process(tmp, epp_port=null_port, response_body="none",
                                                  access_log=log))  # fmt: skip
        out["null-picker"] = (envoy, [null.pid], log)
        if grpclib is not None:
            lib_port = free_port()
            with _on(side):
                lib = subprocess.Popen([sys.executable, str(Path(__file__).with_name(
                    "null_picker_grpclib.py")), "--port", str(lib_port), "--endpoints", host,
                    "--path", grpclib])  # fmt: skip
            stack.callback(stop, lib)
            time.sleep(2.0)
            log = tmp / "null-grpclib.log"
            envoy = stack.enter_context(
                envoy_process(tmp, epp_port=lib_port, response_body="none", access_log=log)
            )
            out["null-grpclib"] = (envoy, [lib.pid], log)
        for name, mode in (("epp-headers", "none"), ("epp-observed", "observed")):
            with _on(side):
                epp = stack.enter_context(epp_process(config, tmp, master_key=KEY,
                                                      args=("--response-body", mode)))  # fmt: skip
            log = tmp / f"{name}.log"
            envoy = stack.enter_context(
                envoy_process(tmp, epp_port=epp.grpc_port, response_body=mode, access_log=log)
            )
            out[name] = (envoy, [epp.proc.pid], log)
        yield {k: (f"{base}/v1/chat/completions", pids, log) for k, (base, pids, log) in
               out.items()}  # fmt: skip


def _waits(log: Path, skip: int) -> list[float]:
    """Envoy's wait for the picker per request (ms), from the access log's lines after
    ``skip``: the request steps, and the response headers' when they were sent."""
    out = []
    lines = log.read_text().splitlines()[skip:]
    for line in lines:
        row = json.loads(line)
        us = 0.0
        for field in ("picker_headers_us", "picker_body_us", "picker_response_us"):
            value = row.get(field)
            if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()):
                us += float(value)
        out.append(us / 1000)
    return out


def _lines(log: Path | None) -> int:
    return len(log.read_text().splitlines()) if log is not None and log.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300, help="per setup and round")
    parser.add_argument("--nice", type=int, default=None)
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--grpclib-path", default=None, help="add null-grpclib (grpclib there)")
    args = parser.parse_args()
    setups_run = SETUPS if args.grpclib_path is None else (*SETUPS[:2], "null-grpclib",
                                                            *SETUPS[2:])  # fmt: skip
    if args.nice is not None:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every process started
        # with the kernel's autogroups, niceness counts only within this session: the
        # session's own weight is set too
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(str(args.nice))
    body = {"model": "chat", "max_tokens": 1, "stream": False,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in setups_run}
    with tempfile.TemporaryDirectory(prefix="bench-epp-latency-") as tmp:
        with _setups(Path(tmp), args.pin, args.grpclib_path) as setups:
            with _on({0} if args.pin else None):
                for _ in range(args.rounds):
                    for setup in setups_run:
                        url, pids, log = setups[setup]
                        sent = {**body, "model": "tiny"} if setup.startswith(("floor", "null")) \
                            else body  # fmt: skip
                        skip = _lines(log)
                        cpu0 = sum(_cpu_s(p) for p in pids)
                        r = asyncio.run(_load(url, sent, 1, args.requests))
                        cpu = sum(_cpu_s(p) for p in pids) - cpu0
                        time.sleep(0.3)  # Envoy's access log flushed (50 ms)
                        waits = _waits(log, skip) if log is not None else [0.0]
                        runs[setup].append({
                            "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                            "wait_p50_ms": statistics.median(waits) if waits else float("nan"),
                            "cpu_ms": 1000 * cpu / max(1, args.requests - r.errors),
                            "errors": r.errors,
                        })  # fmt: skip
    floor = statistics.median(m["p50_ms"] for m in runs["floor"])
    print(f"\nrounds {args.rounds} x {args.requests} requests, one connection, nice "
          f"{args.nice}, pinned {args.pin}, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| setup | client p50 ms | +p50 over floor ms | Envoy's wait p50 ms | picker CPU ms/req "
          "| errors |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for setup in setups_run:
        ms = runs[setup]
        p50 = statistics.median(m["p50_ms"] for m in ms)
        wait = statistics.median(m["wait_p50_ms"] for m in ms)
        cpu = statistics.median(m["cpu_ms"] for m in ms)
        errors = sum(int(m["errors"]) for m in ms)
        print(f"| {setup} | {p50:.2f} | {p50 - floor:+.2f} | "
              f"{'-' if setup == 'floor' else f'{wait:.2f}'} | "
              f"{'-' if setup == 'floor' else f'{cpu:.2f}'} | {errors} |")  # fmt: skip


if __name__ == "__main__":
    main()
