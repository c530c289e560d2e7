"""The admission state seam: schedulers handed one state per pool admit into one capacity,
quotas and fair share; a reload rebuilds the quotas from what is in flight."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fleetgate.config.schema import DeploymentConfig
from fleetgate.routing.deployment import Deployment
from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.quota import BORROWING, UNDER
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.scheduling.state import AdmissionState, LocalState
from fleetgate.telemetry.registry import Registry
from tests.scheduling.support import Clock, policy


class OneAlias:
    """A route table with one alias, ``chat``, of one deployment of ``seqs`` slots."""

    def __init__(self, seqs: int) -> None:
        config = DeploymentConfig.model_validate(
            {"model": "m", "api_base": "http://127.0.0.1:9/v1", "max_num_seqs": seqs}
        )
        provider: Any = None
        self._route = SimpleNamespace(deployments=[Deployment("d", "chat", config, provider)])

    def route(self, alias: str) -> Any:
        return self._route


def _replica(table: OneAlias, config: SchedulingConfig, states: Any = None) -> Scheduler:
    routes: Any = table
    return Scheduler(
        config, lambda: routes, SchedulingMetrics(Registry()), clock=Clock(), states=states
    )


def test_replicas_handed_one_state_admit_into_one_capacity_and_fair_share() -> None:
    shared: dict[str, AdmissionState] = {}

    def states(alias: str) -> AdmissionState:
        return shared.setdefault(alias, LocalState(Clock()))

    table, config = OneAlias(2), SchedulingConfig()
    one, two = _replica(table, config, states), _replica(table, config, states)
    pool_one, pool_two = one.pool("chat"), two.pool("chat")
    assert pool_one is not None and pool_two is not None
    a = policy("a")
    assert one.try_admit(pool_one, a, 100) and one.try_admit(pool_one, a, 100)
    assert not two.try_admit(pool_two, policy("b"), 10)  # the other replica filled it
    assert pool_two.teams == {"a": 2} and pool_two.vtc.value("a") == 200
    one.release(pool_one, a, 0, 0.1)
    assert two.try_admit(pool_two, policy("b"), 10)
    # Without a shared state each replica admits into its own count.
    alone = _replica(table, config)
    own = alone.pool("chat")
    assert own is not None and own.admitted == 0 and alone.try_admit(own, a, 1)


def test_a_reload_with_quotas_counts_what_is_in_flight() -> None:
    table = OneAlias(8)
    scheduler = _replica(table, SchedulingConfig())
    pool = scheduler.pool("chat")
    assert pool is not None and pool.quotas is None
    a = policy("a")
    assert scheduler.try_admit(pool, a, 1) and scheduler.try_admit(pool, a, 1)
    scheduler.reconfigure(
        SchedulingConfig.model_validate(
            {"teams": {"a": {"quota": {"concurrency": {"nominal": 3}}}}}
        )
    )
    assert pool.quotas is not None and pool.quotas.status("a") == UNDER  # the third of 3
    assert scheduler.within(pool, a)
    assert scheduler.try_admit(pool, a, 1)
    assert pool.quotas.status("a") == BORROWING and not scheduler.within(pool, a)
    scheduler.reconfigure(SchedulingConfig())
    assert pool.quotas is None and pool.admitted == 3
