"""GPU cost: DCGM-exporter scrapes next to engine metrics, idle GPU-hours and their cost per
pool and per team, reclaim recommendations (``GET /admin/cost``, ``fleetgate cost``).

Example::

    samples = parse_dcgm(text)              # one GpuSample per GPU of a dcgm-exporter page
"""

from fleetgate.cost.config import CostConfig, PoolConfig
from fleetgate.cost.dcgm import GpuSample, parse_dcgm
from fleetgate.cost.feature import CostFeature, parse_cost_config
from fleetgate.cost.ledger import CostLedger, PoolTick

__all__ = [
    "CostConfig",
    "CostFeature",
    "CostLedger",
    "GpuSample",
    "PoolConfig",
    "PoolTick",
    "parse_cost_config",
    "parse_dcgm",
]
