"""Fault injection: pick at most one fault per request from the rates or the request header.

The ``x-sim-fault`` header forces a fault for one request. Values::

    error            error with the configured status      error:429   a given status
    spike            extra configured delay                spike:250   250 ms extra
    hang             never answer
    reset            abort the connection
    garbage          200 with a non-JSON body
    midstream        break the stream after the configured chunks;  midstream:2  after 2
    none             no fault, whatever the rates say
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Literal

from fleetgate.errors import ConfigError, InvalidRequest
from fleetgate.sim.config import FaultConfig

__all__ = ["FaultKind", "FaultPlan", "choose_fault", "update_faults"]

FaultKind = Literal["error", "spike", "hang", "reset", "garbage", "midstream"]
_KINDS: tuple[FaultKind, ...] = ("error", "spike", "hang", "reset", "garbage", "midstream")


@dataclass(frozen=True)
class FaultPlan:
    """The fault chosen for one request (``kind`` None: behave normally)."""

    kind: FaultKind | None = None
    status: int = 500
    retry_after: float = 1.0
    spike_ms: float = 0.0
    after_chunks: int = 3


def _from_header(value: str, faults: FaultConfig) -> FaultPlan:
    kind, _, arg = value.strip().lower().partition(":")
    if kind == "none":
        return FaultPlan()
    if kind not in _KINDS:
        raise InvalidRequest(f"unknown x-sim-fault {value!r}", param="x-sim-fault")
    base = _plan(kind, faults)
    if not arg:
        return base
    try:
        number = float(arg)
    except ValueError:
        raise InvalidRequest(f"bad x-sim-fault argument {arg!r}", param="x-sim-fault") from None
    if kind == "error":
        return dataclasses.replace(base, status=int(number))
    if kind == "spike":
        return dataclasses.replace(base, spike_ms=number)
    if kind == "midstream":
        return dataclasses.replace(base, after_chunks=int(number))
    return base


def _plan(kind: FaultKind, faults: FaultConfig) -> FaultPlan:
    return FaultPlan(
        kind=kind,
        status=faults.error_status,
        retry_after=faults.retry_after,
        spike_ms=faults.spike_ms,
        after_chunks=faults.midstream_after,
    )


def choose_fault(faults: FaultConfig, header: str | None, rng: random.Random) -> FaultPlan:
    """The fault for one request: the header if present, else one roll per configured rate."""
    if header:
        return _from_header(header, faults)
    rates: tuple[tuple[FaultKind, float], ...] = (
        ("reset", faults.reset_rate),
        ("error", faults.error_rate),
        ("garbage", faults.garbage_rate),
        ("hang", faults.hang_rate),
        ("midstream", faults.midstream_rate),
        ("spike", faults.spike_rate),
    )
    for kind, rate in rates:
        if rate > 0 and rng.random() < rate:
            return _plan(kind, faults)
    return FaultPlan()


def update_faults(current: FaultConfig, changes: Any) -> FaultConfig:
    """A new ``FaultConfig`` with ``changes`` (a JSON object) applied; InvalidRequest if bad."""
    if not isinstance(changes, dict):
        raise InvalidRequest("fault settings must be a JSON object")
    fields = {f.name: f.type for f in dataclasses.fields(FaultConfig)}
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise InvalidRequest(f"unknown fault settings: {', '.join(unknown)}", param=unknown[0])
    values: dict[str, Any] = {}
    for name, value in changes.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(f"{name} must be a number", param=name)
        values[name] = int(value) if name in ("error_status", "midstream_after") else float(value)
    updated = dataclasses.replace(current, **values)
    try:
        updated.validate()
    except ConfigError as exc:  # here it is the caller's mistake
        raise InvalidRequest(exc.message, param=exc.param) from None
    return updated
