"""Two real gateway replicas on one PostgreSQL database and one simulated pool: only one acts,
the other agrees on the pool's state; a request through the replica that did not put the pool
to sleep wakes it and is served; its traffic keeps the acting replica from reclaiming the pool
again while it is the alias's only capacity. Every action is in the shared admin audit."""

from __future__ import annotations

import json
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from openai import OpenAI

from fleetgate.sim import SimConfig
from tests.procs import metric_value, serve_processes
from tests.reclaim.support import WAKE, sim_thread

MASTER = "sk-reclaim-master"
WINDOW_S = 3.0


def _get(url: str, *, auth: bool = True) -> Any:
    headers = {"Authorization": f"Bearer {MASTER}"} if auth else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
        body = r.read()
    return json.loads(body) if body.startswith(b"{") else body.decode()


def _wait(check: Any, limit_s: float, what: str) -> Any:
    started = time.monotonic()
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"not within {limit_s} s: {what}")
        time.sleep(0.05)


def _rows(base: str, action: str) -> list[dict[str, Any]]:
    rows = _get(f"{base}/admin/audit?kind=admin&limit=500")["data"]
    return [r for r in rows if r["action"] == f"reclaim.{action}" and r["target"] == "pool0"]


def _state(base: str) -> str:
    return str(_get(f"{base}/admin/reclaim")["pools"][0]["state"])


def test_one_replica_acts_and_either_wakes_the_pool(tmp_path: Path, shared_pg_url: str) -> None:
    with ExitStack() as stack:
        engine = stack.enter_context(sim_thread(SimConfig(mode="echo", wake_up_s=0.3)))
        sim = f"{engine}/v1"
        dep = {"provider": "openai", "model": "tiny", "api_base": sim, "name": "pool0",
               "wake": WAKE}  # fmt: skip
        config: dict[str, object] = {
            "models": [{"alias": "tiny", "deployments": [dep]}],
            "reclaim": {
                "below_util_pct": 50, "window_s": WINDOW_S, "sample_interval_s": 0.1,
                "settle_s": 0.5, "activity_interval_s": 0.2, "lease_s": 3,
                "pools": [{"deployment": "pool0", "action": "sleep"}],
            },
        }  # fmt: skip
        env = {"FLEETGATE_DATABASE_URL": shared_pg_url}
        replicas = stack.enter_context(
            serve_processes(2, config, tmp_path, master_key=MASTER, env=env)
        )

        def acting() -> list[str]:
            views = {base: _get(f"{base}/admin/reclaim") for base in replicas}
            return [base for base, view in views.items() if view["acting"]]

        (actor,) = _wait(lambda: acting() if len(acting()) == 1 else None, 30, "one acts")
        (other,) = [b for b in replicas if b != actor]
        owners = {b: _get(f"{b}/admin/reclaim")["replica"] for b in replicas}

        def sleeping() -> bool:
            return bool(_get(f"{engine}/is_sleeping", auth=False)["is_sleeping"])

        _wait(sleeping, 60, "the idle pool is put to sleep")
        _wait(lambda: _state(other) == "asleep", 5, "the other replica agrees it sleeps")
        leaders = sum(metric_value(_get(f"{b}/metrics"), "fleetgate_reclaim_leader")
                      for b in replicas)  # fmt: skip
        assert leaders == 1

        # The request reaches the replica that did not put the pool to sleep: woken, served.
        client = OpenAI(base_url=f"{other}/v1", api_key=MASTER, max_retries=0, timeout=15)
        asked = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        reply = client.chat.completions.create(**asked)  # type: ignore[call-overload]
        assert reply.choices[0].message.content
        assert not sleeping()
        _wait(lambda: _state(actor) == "awake", 5, "the acting replica agrees it is awake")
        woke = _wait(lambda: _rows(actor, "wake"), 5, "the wake-up is audited")
        assert woke[0]["detail"]["replica"] == owners[other]
        slept = _rows(actor, "sleep")
        assert len(slept) == 1 and slept[0]["detail"]["replica"] == owners[actor]

        # Sparse traffic through the other replica only: the acting replica sees it (the
        # replicas publish their traffic) and keeps the alias's only capacity.
        ended = time.monotonic() + 3 * WINDOW_S
        while time.monotonic() < ended:
            client.chat.completions.create(**asked)  # type: ignore[call-overload]
            assert not sleeping()
            time.sleep(1.5)
        assert len(_rows(other, "sleep")) == 1  # the one before: never again
        skipped = _wait(lambda: _rows(actor, "skip"), 10, "the guard's skip is audited")
        assert {r["detail"]["code"] for r in skipped} == {"only_capacity"}
        # only one replica ever decided: every sleep and skip is the acting replica's
        assert {r["detail"]["replica"] for r in [*slept, *skipped]} == {owners[actor]}
