"""A canary change and its rollback reach three real gateway replicas within 1 s: the splits are
stored in their shared database (PostgreSQL here), without Redis."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.procs import serve_process, serve_processes, sim_process

MASTER = "sk-canary-master"


def _call(
    url: str, method: str = "GET", body: dict[str, Any] | None = None
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def _deployment(base: str) -> str:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status, headers, payload = _call(f"{base}/v1/chat/completions", "POST", body)
    assert status == 200, payload
    return headers["x-fleetgate-deployment"]


def _time_until_all(replicas: list[str], want: str, started: float, limit: float = 3.0) -> float:
    """Seconds from ``started`` until every replica answered ``want`` 3 times in a row."""
    streak = dict.fromkeys(replicas, 0)
    reached: dict[str, float] = {}
    while len(reached) < len(replicas) and time.monotonic() - started < limit:
        for base in replicas:
            if base in reached:
                continue
            if _deployment(base) == want:
                streak[base] += 1
                if streak[base] == 3:
                    reached[base] = time.monotonic() - started
            else:
                streak[base] = 0
    assert len(reached) == len(replicas), f"only {sorted(reached)} moved to {want}"
    return max(reached.values())


def _assert_split_within_a_second(replicas: list[str], weights: dict[str, int]) -> None:
    """Every replica reports ``weights`` as the split in force (within a second, as it routes)."""
    for base in replicas:
        deadline = time.monotonic() + 1.0
        while True:
            _, _, view = _call(f"{base}/admin/aliases/chat/split")
            got = (view["split"] or {}).get("weights")
            if got == weights or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got == weights, (base, view)


def test_split_and_rollback_reach_three_replicas_within_a_second(
    tmp_path: Path, shared_pg_url: str
) -> None:
    with ExitStack() as stack:
        up_v1 = stack.enter_context(sim_process("--model", "sim-v1"))
        up_v2 = stack.enter_context(sim_process("--model", "sim-v2"))
        deployments = [
            {"provider": "openai", "model": f"sim-{v}", "api_base": url, "name": f"chat-{v}",
             "version": v}
            for v, url in (("v1", up_v1), ("v2", up_v2))
        ]  # fmt: skip
        config = {
            "models": [{"alias": "chat", "deployments": deployments}],
            "tenancy": {"enabled": False},
        }  # fmt: skip
        env = {"FLEETGATE_DATABASE_URL": shared_pg_url}
        replicas = stack.enter_context(
            serve_processes(3, config, tmp_path, master_key=MASTER, env=env)
        )
        split_url = f"{replicas[0]}/admin/aliases/chat/split"
        status, _, _ = _call(split_url, "PUT", {"weights": {"v1": 100, "v2": 0}})
        assert status == 200
        assert _time_until_all(replicas, "chat-v1", time.monotonic()) < 1.0

        # The canary: all traffic to v2, set through one replica, seen by all three.
        started = time.monotonic()
        status, _, got = _call(split_url, "PUT", {"weights": {"v1": 0, "v2": 100}})
        assert status == 200 and got["split"]["weights"] == {"v1": 0, "v2": 100}
        assert _time_until_all(replicas, "chat-v2", started) < 1.0
        _assert_split_within_a_second(replicas, {"v1": 0, "v2": 100})

        # Rollback is the same call with the old weights, through another replica.
        started = time.monotonic()
        status, _, _ = _call(f"{replicas[2]}/admin/aliases/chat/split", "PUT",
                             {"weights": {"v1": 100, "v2": 0}})  # fmt: skip
        assert status == 200
        assert _time_until_all(replicas, "chat-v1", started) < 1.0

        # A replica started after the change serves the stored split at once.
        late = stack.enter_context(serve_process(config, tmp_path, master_key=MASTER, env=env))[0]
        assert _time_until_all([late], "chat-v1", time.monotonic()) < 1.0
        _assert_split_within_a_second([late], {"v1": 100, "v2": 0})
        _, _, health = _call(f"{late}/health/ready")
        assert "canary: database" not in health["missing"]
