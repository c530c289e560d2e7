"""What admission costs below saturation with the fleet's shared state, against this process's.

The scheduling stage of a real app (``create_app``) in front of a pool with room, called in
process for ``--n`` requests (``before`` + ``after``), three ways in the same run: a stage that
does nothing (the loop's own cost), the process-local scheduler (no Redis) and the fleet's
(``FLEETGATE_REDIS_URL``-style ``redis_url``: leases, the sync loop running between batches).
Five rounds; prints the median of the rounds' per-request p50 in microseconds and the fleet's
cost over the local one.

    python bench/fleet/fast_path.py [--n 100000] [--redis redis://127.0.0.1:6379] [--quotas]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.contract.stages import Stage
from fleetgate.scheduling.fleet_state import FleetState


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
        headers={},
        started=time.perf_counter(),
    )


async def _time(stage: Stage, principal: Principal, n: int, batch: int = 1000) -> float:
    """The median over batches of the per-request microseconds."""
    per: list[float] = []
    for _ in range(n // batch):
        reqs = [_request(principal) for _ in range(batch)]
        started = time.perf_counter()
        for req in reqs:
            await stage.before(req)
            stage.after(req, req.outcome)
        per.append((time.perf_counter() - started) / batch * 1e6)
        await asyncio.sleep(0)  # the fleet's sync runs here, outside the request path
    return statistics.median(per)


def _config(quotas: bool, prefix: str) -> Any:
    team: dict[str, object] = {"weight": 2}
    orgs: dict[str, object] = {}
    if quotas:
        team.update(org="o1", quota={"concurrency": {"nominal": 32, "lending_limit": 24},
                                     "tokens_per_s": {"nominal": 1e6}})  # fmt: skip
        orgs = {"o1": {"quota": {"concurrency": {"nominal": 48, "borrowing_limit": 16}}}}
    return parse_config(
        {
            "models": [{"alias": "tiny", "deployments": [
                {"model": "m", "api_base": "http://127.0.0.1:9/v1", "max_num_seqs": 64}]}],
            "tenancy": {"enabled": False},
            "scheduling": {"teams": {"t1": team}, "orgs": orgs,
                           "fleet": {"key_prefix": prefix}},
        }
    )  # fmt: skip


async def _stage(tmp: Path, config: Any, redis: str | None) -> tuple[Stage, Any]:
    settings = Settings(master_key="sk-m", data_dir=tmp, watch_config=False, redis_url=redis)
    state = build_state(settings, config)
    create_app(settings, state=state)
    stage = next(s for s in state.stages if s.name == "scheduling")
    scheduler = stage.scheduler  # type: ignore[attr-defined]
    await scheduler.start()
    return stage, scheduler


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--quotas", action="store_true", help="t1 in an org, both with quotas")
    ns = p.parse_args()
    n = min(max(ns.n, 1000), 2_000_000)
    config = _config(ns.quotas, f"bench{secrets.token_hex(4)}:")
    principal = Principal("k1", team_id="t1", tags=(("env", "prod"),))
    with tempfile.TemporaryDirectory() as tmp:
        local, local_s = await _stage(Path(tmp) / "a", config, None)
        fleet, fleet_s = await _stage(Path(tmp) / "b", config, ns.redis)
        pool = fleet_s.pool("tiny")
        for _ in range(200):  # the first sync grants the lease
            if isinstance(pool.state, FleetState) and pool.state.lease:
                break
            await asyncio.sleep(0.01)
        rounds: dict[str, list[float]] = {"nothing": [], "local": [], "fleet": []}
        stages: dict[str, Stage] = {"nothing": Nothing(), "local": local, "fleet": fleet}
        for _ in range(5):
            for name, stage in stages.items():
                rounds[name].append(await _time(stage, principal, n))
        med = {name: statistics.median(values) for name, values in rounds.items()}
        for name, value in med.items():
            print(f"{name:>8}: {value:.3f} us per request (median of 5 rounds of batch p50s)")
        local_cost = med["local"] - med["nothing"]
        fleet_cost = med["fleet"] - med["nothing"]
        print(f"admission below saturation: local {local_cost:.3f} us, fleet {fleet_cost:.3f} us "
              f"(fleet/local {fleet_cost / local_cost:.2f}x, fleet - local "
              f"{fleet_cost - local_cost:+.3f} us)")  # fmt: skip
        state = pool.state
        if isinstance(state, FleetState):
            print(f"fleet: lease {state.lease}, syncs {fleet_s._link.syncs}, "
                  f"failed {state.failed_syncs}")  # fmt: skip
        await local_s.aclose()
        await fleet_s.aclose()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
