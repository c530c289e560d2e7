"""What admission costs below saturation: the scheduling stage's ``before`` + ``after``.

The stage of a real app (``create_app``) in front of a pool with room, called in process for
``--n`` requests of a key with tags; compared, in the same run, with a stage that does nothing
(the loop's own cost). Prints the per-request p50 and mean in microseconds.

    python bench/scheduling/fast_path.py [--n 200000] [--quotas]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from fleetgate.api.state import GatewayState
from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.contract.stages import Stage


class Nothing:
    name = "nothing"

    async def before(self, req: GatewayRequest) -> None:
        return None

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        return None


def _request(principal: Principal) -> GatewayRequest:
    return GatewayRequest(
        request_id="r",
        endpoint=Endpoint.CHAT,
        principal=principal,
        body={},
        alias="tiny",
        stream=True,
        want_usage=False,
        prompt_tokens=40,
        max_tokens=24,
        headers={"x-session-id": "s"},
        started=time.perf_counter(),
    )


async def _time(stage: Stage, principal: Principal, n: int, batch: int = 1000) -> list[float]:
    """Per-request microseconds, measured over batches of ``batch`` requests."""
    per: list[float] = []
    for _ in range(n // batch):
        reqs = [_request(principal) for _ in range(batch)]
        started = time.perf_counter()
        for req in reqs:
            await stage.before(req)
            stage.after(req, req.outcome)
        per.append((time.perf_counter() - started) / batch * 1e6)
    return per


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--quotas", action="store_true", help="t1 in an org, both with quotas")
    ns = p.parse_args()
    n = min(max(ns.n, 1000), 2_000_000)
    team: dict[str, object] = {"weight": 2}
    orgs: dict[str, object] = {}
    if ns.quotas:
        team.update(org="o1", quota={"concurrency": {"nominal": 32, "lending_limit": 24},
                                     "tokens_per_s": {"nominal": 1e6}})  # fmt: skip
        orgs = {"o1": {"quota": {"concurrency": {"nominal": 48, "borrowing_limit": 16}}}}
    config = parse_config(
        {
            "models": [{"alias": "tiny", "deployments": [
                {"model": "m", "api_base": "http://127.0.0.1:9/v1", "max_num_seqs": 64}]}],
            "tenancy": {"enabled": False},
            "scheduling": {"teams": {"t1": team}, "orgs": orgs},
        }
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(master_key="sk-m", data_dir=Path(tmp), watch_config=False)
        state: GatewayState = build_state(settings, config)
        create_app(settings, state=state)
        stage = next(s for s in state.stages if s.name == "scheduling")
        principal = Principal("k1", team_id="t1", tags=(("env", "prod"),))
        results = {}
        for name, s in (("nothing", Nothing()), ("scheduling", stage), ("nothing ", Nothing())):
            per = await _time(s, principal, n)
            results[name.strip()] = per
            p50, mean = statistics.median(per), statistics.mean(per)
            print(f"{name:>11}: p50 {p50:.3f} us, mean {mean:.3f} us")
        extra = statistics.median(results["scheduling"]) - statistics.median(results["nothing"])
        print(f"admission below saturation adds {extra:.3f} us per request (p50 of batches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
