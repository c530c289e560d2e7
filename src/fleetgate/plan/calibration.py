"""The monthly calibration: last month's saved forecast against what happened.

``fleetgate plan forecast --save forecast.json`` keeps the hourly forecast and the planning
figures; a month later ``--calibrate forecast.json`` reads the actual history of the hours it
covered and reports:

- ``wape_requests`` / ``wape_tokens``: ``sum|forecast - actual| / sum(actual)`` per hour;
- ``total_ratio``: actual tokens over forecast tokens;
- ``peak_ratio``: the actual peak tokens/s over the forecast peak;
- ``redundancy``: the factor used, and ``suggested_redundancy``, moved half-way towards
  covering the peak error: ``max(1, r * (1 + 0.5 * (peak_ratio - 1)))`` (half-way, so that one
  unusual month does not swing the fleet size; a forecast that was right leaves it alone).

Example::

    report = calibration_report(orjson.loads(saved), actual_history)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fleetgate.errors import InvalidRequest
from fleetgate.plan.forecast import Forecast, wape
from fleetgate.plan.history import FIELDS, HourlyHistory, format_hour

__all__ = ["DAMPING", "calibration_report", "saved_forecast"]

DAMPING = 0.5


def saved_forecast(
    forecast: Forecast, *, redundancy: float, gpu_tokens_per_s: float
) -> dict[str, Any]:
    """What ``--save`` writes: the hourly totals and the planning figures used."""
    return {
        "start": forecast.start,
        "hours": forecast.hours,
        "redundancy": redundancy,
        "gpu_tokens_per_s": gpu_tokens_per_s,
        "totals": {f: [round(float(v), 3) for v in forecast.total(f)] for f in FIELDS},
    }


def _saved(data: Mapping[str, Any]) -> tuple[int, dict[str, np.ndarray], float]:
    try:
        start, hours = int(data["start"]), int(data["hours"])
        totals = {f: np.asarray(data["totals"][f], dtype=float) for f in FIELDS}
        redundancy = float(data["redundancy"])
    except (KeyError, TypeError, ValueError):
        raise InvalidRequest(
            "the saved forecast lacks start, hours, redundancy or totals (write it with --save)",
            param="calibrate",
        ) from None
    if any(len(v) != hours for v in totals.values()) or redundancy < 1:
        raise InvalidRequest("the saved forecast is inconsistent", param="calibrate")
    return start, totals, redundancy


def calibration_report(saved: Mapping[str, Any], actual: HourlyHistory) -> dict[str, Any]:
    """Compare a saved forecast with the actual history over the hours both cover."""
    start, totals, redundancy = _saved(saved)
    lo = max(start, actual.start)
    hi = min(start + len(totals["requests"]), actual.start + actual.hours)
    if hi - lo < 24:
        raise InvalidRequest(
            "the history covers less than a day of the saved forecast's hours", param="calibrate"
        )
    fc = {f: v[lo - start : hi - start] for f, v in totals.items()}
    act = {f: actual.total(f)[lo - actual.start : hi - actual.start] for f in FIELDS}
    fc_tok = fc["input_tokens"] + fc["output_tokens"]
    act_tok = act["input_tokens"] + act["output_tokens"]
    fc_peak = float(fc_tok.max()) / 3600.0
    act_peak = float(act_tok.max()) / 3600.0
    peak_ratio = act_peak / fc_peak if fc_peak > 0 else float("inf")
    suggested = max(1.0, redundancy * (1 + DAMPING * (peak_ratio - 1)))
    return {
        "from": format_hour(lo),
        "until": format_hour(hi),
        "hours": hi - lo,
        "wape_requests": wape(fc["requests"], act["requests"]),
        "wape_tokens": wape(fc_tok, act_tok),
        "forecast_tokens": float(fc_tok.sum()),
        "actual_tokens": float(act_tok.sum()),
        "total_ratio": float(act_tok.sum() / fc_tok.sum()) if fc_tok.sum() > 0 else None,
        "forecast_peak_tokens_per_s": fc_peak,
        "actual_peak_tokens_per_s": act_peak,
        "peak_ratio": peak_ratio,
        "redundancy": redundancy,
        "suggested_redundancy": round(suggested, 3),
    }
