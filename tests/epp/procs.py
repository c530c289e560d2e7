"""``fleetgate epp`` as a real process on 127.0.0.1, and a gRPC health probe of it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fleetgate.cli.processes import stop, wait_http
from tests.procs import free_port

__all__ = ["Epp", "epp_process", "health_status"]


@dataclass(frozen=True)
class Epp:
    http: str  # base URL of its HTTP side (metrics, health, admin)
    grpc_port: int
    proc: subprocess.Popen[bytes]


@contextmanager
def epp_process(
    config: dict[str, object],
    tmp: Path,
    *,
    master_key: str,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Iterator[Epp]:
    """``fleetgate epp`` with ``config`` on free ports, once its HTTP side is live."""
    port, grpc_port = free_port(), free_port()
    cfg = tmp / f"epp-{port}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "epp", "--config", str(cfg),
           "--port", str(port), "--grpc-port", str(grpc_port),
           "--data-dir", str(tmp / f"epp-data-{port}"), *args]  # fmt: skip
    full_env = {**os.environ, "FLEETGATE_MASTER_KEY": master_key, **(env or {})}
    log = (tmp / f"epp-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/live", proc, timeout=60.0)
        yield Epp(f"http://127.0.0.1:{port}", grpc_port, proc)
    finally:
        stop(proc)
        log.close()


def health_status(grpc_port: int, service: str) -> str:
    """The gRPC health status of ``service`` (``SERVING``, ``NOT_SERVING``, ...)."""
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
