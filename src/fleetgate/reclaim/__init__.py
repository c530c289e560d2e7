"""Idle GPU pools reclaimed: put to sleep (vLLM sleep mode) or scaled to zero (KEDA) when
their utilisation stays under a threshold for a window, never when they are the only capacity
of an alias with traffic; one replica acts, every replica agrees on the state, every action is
audited. See ``docs/operations.md`` (Idle reclaim)."""

from fleetgate.reclaim.config import RECLAIM_SECTION, ReclaimConfig, ReclaimPool
from fleetgate.reclaim.feature import ReclaimFeature
from fleetgate.reclaim.reclaimer import Reclaimer

__all__ = ["RECLAIM_SECTION", "ReclaimConfig", "ReclaimFeature", "ReclaimPool", "Reclaimer"]
