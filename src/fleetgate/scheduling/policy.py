"""Who a request is, for the scheduler: its team, band, weight, wait limit and TTFT deadline.

The band comes from the config (the key's policy, then its team's), else the key's
``priority`` tag (key tags override team tags in tenancy), else ``default_band``. The request
header ``x-fleetgate-priority`` may lower it, never raise it: a caller cannot buy itself
capacity its key was not given. ``x-fleetgate-ttft-deadline-ms`` sets the request's deadline
for its first token (else the key's or team's ``ttft_deadline_ms``, else the tag of that name).

Example::

    policy = resolve(config, principal, {"x-fleetgate-priority": "batch"})
    policy.band, policy.team, policy.deadline_s   # ("batch", "team-1", None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest
from fleetgate.scheduling.config import BANDS, Band, KeyPolicy, SchedulingConfig

__all__ = [
    "DEADLINE_HEADER",
    "PRIORITY_HEADER",
    "RANK",
    "Policies",
    "RequestPolicy",
    "resolve",
]

PRIORITY_HEADER = "x-fleetgate-priority"
DEADLINE_HEADER = "x-fleetgate-ttft-deadline-ms"
RANK: dict[str, int] = {band: i for i, band in enumerate(BANDS)}  # 0 is the highest
BATCH_RANK = RANK["batch"]  # it and the bands below keep the batch headroom when whole
_MAX_DEADLINE_MS = 3_600_000.0
_MAX_CACHED = 10_000  # keys remembered before the cache starts over


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """What the scheduler applies to one request."""

    team: str
    band: Band
    weight: float
    reject: bool  # saturated: refuse (429) instead of queueing
    max_wait_s: float
    deadline_s: float | None  # the first token must come within this, from arrival
    guaranteed: int = 0  # the team's requests in flight admitted even over the pool's limit
    # a request nothing can preempt (not a stream) of the batch band or lower, the batch
    # lane's lines among them: it leaves the pool's ``batch_headroom`` free (`for_request`)
    keeps_headroom: bool = False

    @property
    def rank(self) -> int:
        return RANK[self.band]

    def for_request(self, stream: bool) -> RequestPolicy:
        """This policy for one request: a whole (non-streaming) response of the batch band
        or lower cannot be preempted, so it keeps the headroom free for interactive work."""
        if stream or RANK[self.band] < BATCH_RANK:
            return self
        return replace(self, keeps_headroom=True)


def _tag(principal: Principal, name: str) -> str | None:
    for key, value in principal.tags:
        if key == name:
            return value
    return None


def _tag_deadline_ms(principal: Principal) -> float | None:
    raw = _tag(principal, "ttft_deadline_ms")
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None  # an admin's bad tag is not the caller's fault: no default deadline
    return value if value is not None and 0 < value <= _MAX_DEADLINE_MS else None


def _header_deadline_ms(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 < value <= _MAX_DEADLINE_MS):
        raise InvalidRequest(
            f"{DEADLINE_HEADER} must be a number of milliseconds above 0 and at most "
            f"{_MAX_DEADLINE_MS:.0f}.",
            param=DEADLINE_HEADER,
        )
    return value


def _lowered(band: Band, asked: str | None) -> Band:
    if asked is None:
        return band
    wanted = asked.strip().lower()
    if wanted not in RANK:
        raise InvalidRequest(
            f"{PRIORITY_HEADER} must be one of {', '.join(BANDS)}.", param=PRIORITY_HEADER
        )
    return BANDS[max(RANK[band], RANK[wanted])]  # lower, never higher


def _first(*values: object) -> object:
    return next((v for v in values if v is not None), None)


def resolve(
    config: SchedulingConfig, principal: Principal, headers: Mapping[str, str]
) -> RequestPolicy:
    """The request's policy (400 for a bad priority or deadline header)."""
    team = principal.tenant
    team_policy = config.teams.get(team)
    key_policy = config.keys.get(principal.key_id) or KeyPolicy()
    tp = team_policy or KeyPolicy()
    tag = _tag(principal, "priority")
    band_value = _first(key_policy.band, tp.band, tag if tag in RANK else None)
    band: Band = config.default_band if band_value is None else BANDS[RANK[str(band_value)]]
    band = _lowered(band, headers.get(PRIORITY_HEADER))
    limit = config.max_wait_s.of(band)
    own_wait = _first(key_policy.max_wait_s, tp.max_wait_s)
    max_wait = min(limit, float(own_wait)) if isinstance(own_wait, float | int) else limit
    header = headers.get(DEADLINE_HEADER)
    if header is not None:
        deadline_ms: float | None = _header_deadline_ms(header)
    else:
        found = _first(key_policy.ttft_deadline_ms, tp.ttft_deadline_ms)
        own = float(found) if isinstance(found, float | int) else None
        deadline_ms = own if own is not None else _tag_deadline_ms(principal)
    on_saturation = _first(key_policy.on_saturation, tp.on_saturation) or "queue"
    return RequestPolicy(
        team=team,
        band=band,
        weight=team_policy.weight if team_policy is not None else 1.0,
        reject=on_saturation == "reject",
        max_wait_s=max_wait,
        deadline_s=None if deadline_ms is None else deadline_ms / 1000.0,
        guaranteed=team_policy.guaranteed if team_policy is not None else 0,
    )


class Policies:
    """`resolve` for the request path: a key's policy is worked out once per config and
    remembered; only a request with a priority or deadline header is resolved afresh."""

    __slots__ = ("_cache", "config")

    def __init__(self, config: SchedulingConfig) -> None:
        self.config = config
        self._cache: dict[tuple[str, str | None, tuple[tuple[str, str], ...]], RequestPolicy] = {}

    def of(self, principal: Principal, headers: Mapping[str, str]) -> RequestPolicy:
        if PRIORITY_HEADER in headers or DEADLINE_HEADER in headers:
            return resolve(self.config, principal, headers)
        key = (principal.key_id, principal.team_id, principal.tags)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            found = self._cache[key] = resolve(self.config, principal, {})
        return found
