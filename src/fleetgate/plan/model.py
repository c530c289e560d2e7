"""The capacity model: traffic -> QPS -> tokens/s -> GPUs -> cost, with every rounding explicit.

Formulas (all in ``PlanInputs`` units)::

    requests_per_day = dau * conversations_per_user * turns_per_conversation
    qps_avg          = requests_per_day / (active_hours * 3600)
    qps_peak         = qps_avg * peak_factor
    tokens_per_s_avg = qps_avg * (input_tokens + output_tokens)
    gpus_avg_exact   = tokens_per_s_avg / gpu_tokens_per_s * redundancy
    gpus_peak_exact  = gpus_avg_exact * peak_factor
    gpus_avg, gpus_peak = the exact values rounded UP to a multiple of round_gpus_to
    gpus_day_avg_exact = gpus_avg_exact * active_hours / 24   (the load over the whole day)
    cost_month_always_on_usd = gpus_peak * gpu_price_per_hour * hours_per_month
    cost_month_autoscaled_usd = sum over the 24 hours of
        gpus_h * gpu_price_per_hour * hours_per_month / 24,
        gpus_h = round_up(max(min_gpus, need_h, min(need_h * autoscale_headroom,
                                                     gpus_peak_exact))),
        need_h = requests_per_day * weight_h / sum(weights) / 3600 * tokens / gpu_tokens_per_s
                 * redundancy, and at least gpus_peak_exact in the busiest hour
    gpus_autoscaled_avg = sum(gpus_h) / 24

The default diurnal profile puts weight on ``active_hours`` hours (from 09:00) and none
elsewhere, 1 on average (which matches the ``qps_avg`` definition), with ``peak_factor`` in the
middle hour: the autoscaled fleet reaches the peak fleet there. With ``--diurnal`` the peak is
taken to fall in the busiest hour of the profile. The headroom never takes an hour past the
peak fleet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fleetgate.errors import InvalidRequest

__all__ = ["PlanInputs", "default_diurnal", "round_up"]


def round_up(x: float, step: int) -> int:
    """``x`` rounded up to a multiple of ``step`` (tolerating float noise of 1e-9)."""
    return int(math.ceil(x / step - 1e-9)) * step


def default_diurnal(
    active_hours: float, peak_factor: float = 1.0, start_hour: int = 9
) -> tuple[float, ...]:
    """Weight on ``active_hours`` consecutive hours from ``start_hour`` (fractional last hour),
    1 on average; the middle whole hour carries ``peak_factor`` (the day's peak happens in it)
    and the other active hours share the rest equally, so the weights still add up to
    ``active_hours``. A peak no hour can hold (``peak_factor`` above the whole hours) puts
    everything in the middle hour."""
    w = [0.0] * 24
    left = active_hours
    h = start_hour
    while left > 0:
        w[h % 24] += min(1.0, left)
        left -= 1.0
        h += 1
    whole = [i % 24 for i in range(start_hour, start_hour + int(active_hours))]
    if peak_factor > 1 and len(whole) > 1:
        peak = whole[(len(whole) - 1) // 2]
        top = min(peak_factor, active_hours)
        rest = active_hours - top
        others = sum(w) - w[peak]
        w = [top if i == peak else x * rest / others for i, x in enumerate(w)]
    return tuple(w)


@dataclass(frozen=True)
class PlanInputs:
    """What a capacity plan starts from (see the module docstring for every formula)."""

    dau: float
    conversations_per_user: float
    turns_per_conversation: float
    active_hours: float = 8.0
    peak_factor: float = 3.0
    input_tokens: float = 2000.0
    output_tokens: float = 500.0
    gpu_tokens_per_s: float = 4000.0
    gpu_price_per_hour: float = 3.0
    redundancy: float = 1.0
    round_gpus_to: int = 1
    hours_per_month: float = 720.0
    diurnal: Sequence[float] | None = None
    autoscale_headroom: float = 1.2
    min_gpus: int = 1
    ttft_p95_target_ms: float | None = None
    base_ttft_p95_ms: float = 200.0
    slots_per_gpu: int = 64
    service_time_s: float | None = None
    service_cv: float | None = None
    service_time_full_s: float | None = None
    base_ttft_std_ms: float = 0.0
    prefill_tokens_per_s_per_gpu: float | None = None
    decode_tokens_per_s_per_gpu: float | None = None

    def validate(self) -> None:
        """Raise ``InvalidRequest`` naming the first bad field."""
        for name in (
            "dau",
            "conversations_per_user",
            "turns_per_conversation",
            "active_hours",
            "gpu_tokens_per_s",
            "hours_per_month",
        ):
            if getattr(self, name) <= 0:
                raise InvalidRequest(f"{name} must be > 0", param=name)
        if not 0 < self.active_hours <= 24:
            raise InvalidRequest("active_hours must be within (0, 24]", param="active_hours")
        if self.peak_factor < 1 or self.redundancy < 1:
            raise InvalidRequest("peak_factor and redundancy must be >= 1", param="peak_factor")
        if self.round_gpus_to < 1 or self.slots_per_gpu < 1:
            raise InvalidRequest("round_gpus_to and slots_per_gpu must be >= 1")
        if self.diurnal is not None and (
            len(self.diurnal) != 24 or min(self.diurnal) < 0 or sum(self.diurnal) <= 0
        ):
            raise InvalidRequest(
                "diurnal needs 24 non-negative weights, not all 0", param="diurnal"
            )

    @property
    def tokens_per_request(self) -> float:
        """Input plus output tokens of one request."""
        return self.input_tokens + self.output_tokens

    def weights(self) -> tuple[float, ...]:
        """The 24 hourly weights in use."""
        if self.diurnal is not None:
            return tuple(self.diurnal)
        return default_diurnal(self.active_hours, self.peak_factor)
