"""Per-deployment ``rpm`` / ``tpm`` hold for the fleet: two real gateway replicas on one
PostgreSQL database and one Redis count each deployment in the same window. Requests past a
deployment's cap, on either replica, go to the alias's other deployment, then 429 with
Retry-After; ``tpm`` counts the answer's tokens, settled after it, so an answer served through
one replica fills the window the other one checks."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.procs import serve_processes, sim_process

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

MASTER = "sk-deployment-rate-master"


def _chat(base: str, alias: str) -> tuple[int, dict[str, str], Any]:
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}]}
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def _deployment(name: str, url: str, **caps: int) -> dict[str, Any]:
    return {"provider": "openai", "model": "sim", "api_base": url, "name": name, **caps}


def _assert_rpm_counted_over(replicas: list[str]) -> None:
    """rpm: a takes 3 and b 2 in any 60 s, counted over both replicas (each alone would let 5
    through); the rest, on either replica, 429 with Retry-After."""
    served: list[str] = []
    refused: list[dict[str, str]] = []
    for i in range(10):
        status, headers, body = _chat(replicas[i % 2], "chat")
        if status == 200:
            served.append(headers["x-fleetgate-deployment"])
        else:
            assert status == 429, body
            assert body["error"]["code"] == "rate_limit_exceeded", body
            refused.append(headers)
    assert sorted(served) == ["a", "a", "a", "b", "b"], served
    assert len(refused) == 5
    for headers in refused:
        assert 1 <= int(headers["Retry-After"]) <= 60, headers


def test_deployment_caps_hold_across_replicas_with_tenancy_off(
    tmp_path: Path, redis_url: str
) -> None:
    """No keys, teams or shared database (tenancy off, each replica its own SQLite): the caps
    still count in the fleet's Redis, not per process."""
    with ExitStack() as stack:
        a, b = (stack.enter_context(sim_process("--model", "sim")) for _ in range(2))
        config: dict[str, object] = {
            "models": [{"alias": "chat", "deployments": [_deployment("a", a, rpm=3),
                                                         _deployment("b", b, rpm=2)]}],
            "tenancy": {"enabled": False},
            "health": {"probe_interval_s": 30},
            "server": {"access_log": False},
        }  # fmt: skip
        replicas = [
            stack.enter_context(
                serve_processes(
                    1, config, tmp_path, master_key=MASTER, env={"FLEETGATE_REDIS_URL": redis_url}
                )  # fmt: skip
            )[0]
            for _ in range(2)
        ]
        _assert_rpm_counted_over(replicas)


def test_deployment_caps_hold_across_two_replicas(
    tmp_path: Path, shared_pg_url: str, redis_url: str
) -> None:
    with ExitStack() as stack:
        a, b = (stack.enter_context(sim_process("--model", "sim")) for _ in range(2))
        long = stack.enter_context(sim_process("--model", "sim", "--output-len", "60"))
        config: dict[str, object] = {
            "models": [
                {"alias": "chat", "deployments": [_deployment("a", a, rpm=3),
                                                  _deployment("b", b, rpm=2)]},
                {"alias": "long", "fallbacks": ["spare"],
                 "deployments": [_deployment("long", long, tpm=50)]},
                {"alias": "spare", "deployments": [_deployment("c", a), _deployment("d", b)]},
            ],
            "health": {"probe_interval_s": 30},
            "server": {"access_log": False},
        }  # fmt: skip
        env = {"FLEETGATE_DATABASE_URL": shared_pg_url, "FLEETGATE_REDIS_URL": redis_url}
        # one migrates first; the other finds the schema in place (60 s each to come up)
        replicas = [
            stack.enter_context(serve_processes(1, config, tmp_path, master_key=MASTER, env=env))[0]
            for _ in range(2)
        ]
        first, second = replicas

        _assert_rpm_counted_over(replicas)

        # tpm counts output tokens: one 60-token answer through the first replica fills
        # the 50-token window, so the second replica sends the next request to the fallback
        # (counting prompts only, the window would hold two short prompts)
        status, headers, body = _chat(first, "long")
        assert status == 200 and headers["x-fleetgate-deployment"] == "long", body
        assert body["usage"]["completion_tokens"] == 60
        time.sleep(0.3)  # the settle leaves just after the answer
        status, headers, body = _chat(second, "long")
        assert status == 200, body
        assert headers["x-fleetgate-deployment"] in ("c", "d"), headers
