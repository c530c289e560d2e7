"""Rate and budget limits: one `Limiter` interface, in-process and Redis implementations."""

from fleetgate.limits.base import Denial, Limiter, Reservation, Scope, ScopeUsage
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.limits.redis import FailPolicy, RedisLimiter

__all__ = [
    "Denial",
    "FailPolicy",
    "Limiter",
    "MemoryLimiter",
    "RedisLimiter",
    "Reservation",
    "Scope",
    "ScopeUsage",
]
