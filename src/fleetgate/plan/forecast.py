"""Fit the gateway's hourly history and forecast it: trend, week and day shape, marked events.

The model, per alias and per field (requests, input tokens, output tokens)::

    log(1 + y_h) = g * month(h) + w[hour_of_week(h)]          (least squares, event hours out)
    baseline_h   = c * exp(g * month(h) + w[hour_of_week(h)]) - 1
    forecast_h   = baseline_h * multiplier(event covering h, else 1)

``month(h)`` counts 30-day months, so ``exp(g) - 1`` is the month-over-month growth; ``w`` holds
168 hour-of-week levels (the weekly and the daily shape at once); ``c`` rescales the fit so its
sum over the training hours equals the history's (log fits underestimate means otherwise).
Each past event's multiplier is the history over the baseline during the event; a future
event takes its own multiplier when given, else the mean of past events of its kind.

Example::

    fit = fit_history(history, events)
    fc = fit.forecast(start=history.start + history.hours, hours=6 * 720, lines=lines)
    fc.total("requests")            # numpy array, one value per forecast hour
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetgate.errors import InvalidRequest
from fleetgate.plan.events import BusinessLine, Event
from fleetgate.plan.history import FIELDS, HourlyHistory

__all__ = [
    "Forecast",
    "HistoryFit",
    "SeriesFit",
    "fit_history",
    "hour_of_week",
    "seasonal_naive",
    "wape",
]

MONTH_H = 720  # hours in a planning month (30 days, as the planner's hours_per_month)
WEEK_H = 168
MIN_TRAIN_H = 2 * WEEK_H


def hour_of_week(hours: np.ndarray) -> np.ndarray:
    """0 = Monday 00:00 UTC (epoch hour 0 was a Thursday)."""
    return (hours + 72) % WEEK_H


def wape(forecast: np.ndarray, actual: np.ndarray) -> float:
    """Weighted absolute percentage error: ``sum|f - a| / sum(a)``."""
    total = float(np.sum(actual))
    if total <= 0:
        raise InvalidRequest("no actual traffic to measure the error against", param="history")
    return float(np.sum(np.abs(forecast - actual))) / total


def seasonal_naive(train: np.ndarray, hours: int) -> np.ndarray:
    """The naive baseline: the last observed week, repeated."""
    if len(train) < WEEK_H:
        raise InvalidRequest("seasonal-naive needs at least one week of history")
    week = train[-WEEK_H:]
    return np.resize(week, hours)


def _event_mask(start: int, hours: int, events: Iterable[Event]) -> np.ndarray:
    mask = np.zeros(hours, dtype=bool)
    for ev in events:
        lo, hi = max(ev.start - start, 0), min(ev.end - start, hours)
        if lo < hi:
            mask[lo:hi] = True
    return mask


@dataclass(frozen=True)
class SeriesFit:
    """One fitted series: growth per month, 168 hour-of-week levels, the rescale factor."""

    growth_log: float
    levels: np.ndarray
    scale: float
    origin: int  # the epoch hour of month 0

    @property
    def growth_per_month(self) -> float:
        return float(np.expm1(self.growth_log))

    def baseline(self, start: int, hours: int) -> np.ndarray:
        h = np.arange(start, start + hours)
        months = (h - self.origin) / MONTH_H
        level = self.scale * np.exp(self.growth_log * months + self.levels[hour_of_week(h)])
        out: np.ndarray = np.maximum(0.0, level - 1)
        return out


def _fit_series(y: np.ndarray, start: int, mask: np.ndarray) -> SeriesFit:
    h = np.arange(start, start + len(y))
    keep = ~mask
    how = hour_of_week(h)[keep]
    months = ((h - start) / MONTH_H)[keep]
    x = np.zeros((int(keep.sum()), 1 + WEEK_H))
    x[:, 0] = months
    x[np.arange(len(how)), 1 + how] = 1.0
    coef, *_ = np.linalg.lstsq(x, np.log1p(y[keep]), rcond=None)
    fit = SeriesFit(float(coef[0]), coef[1:].copy(), 1.0, start)
    raw = fit.baseline(start, len(y))[keep] + 1.0
    scale = float((np.sum(y[keep]) + keep.sum()) / max(np.sum(raw), 1e-12))
    return SeriesFit(fit.growth_log, fit.levels, scale, start)


@dataclass
class Forecast:
    """Forecast hours ``[start, start + hours)``: series per alias (and per business line)."""

    start: int
    hours: int
    series: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def total(self, name: str) -> np.ndarray:
        out = np.zeros(self.hours)
        for per in self.series.values():
            out += per[name]
        return out

    def as_history(self) -> HourlyHistory:
        return HourlyHistory(self.start, self.hours, self.series)


@dataclass
class HistoryFit:
    """Fits of every alias and field, plus the events' measured multipliers."""

    fits: dict[str, dict[str, SeriesFit]]
    events: list[Event]
    measured: dict[str, float]  # past event name -> multiplier (requests, all aliases)
    history_end: int
    shape: np.ndarray  # mean-1 hour-of-week shape of all requests (for business lines)

    def growth_per_month(self) -> dict[str, float]:
        return {a: f["requests"].growth_per_month for a, f in self.fits.items()}

    def multiplier(self, ev: Event) -> float:
        if ev.multiplier is not None:
            return ev.multiplier
        if ev.name in self.measured:
            return self.measured[ev.name]
        past = [e for e in self.events if e.name in self.measured]
        same = [self.measured[e.name] for e in past if e.kind == ev.kind]
        pool = same or [self.measured[e.name] for e in past]
        return float(np.mean(pool)) if pool else 1.0

    def multipliers(self, start: int, hours: int) -> np.ndarray:
        out = np.ones(hours)
        for ev in self.events:
            lo, hi = max(ev.start - start, 0), min(ev.end - start, hours)
            if lo < hi:
                out[lo:hi] *= self.multiplier(ev)
        return out

    def forecast(self, start: int, hours: int, lines: Sequence[BusinessLine] = ()) -> Forecast:
        """Hours ``[start, start + hours)``: every alias's fit times the events' multipliers,
        plus each business line (series named ``line:<name>``)."""
        if hours < 1:
            raise InvalidRequest("the forecast needs at least one hour", param="months")
        mult = self.multipliers(start, hours)
        series = {
            alias: {name: fit.baseline(start, hours) * mult for name, fit in per.items()}
            for alias, per in self.fits.items()
        }
        h = np.arange(start, start + hours)
        for line in lines:
            ramp = (
                np.ones(hours)
                if line.ramp_days <= 0
                else np.clip((h - line.start + 1) / (line.ramp_days * 24), 0.0, 1.0)
            )
            ramp[h < line.start] = 0.0
            req = line.requests_per_day / 24.0 * self.shape[hour_of_week(h)] * ramp * mult
            series[f"line:{line.name}"] = {
                "requests": req,
                "input_tokens": req * line.input_tokens,
                "output_tokens": req * line.output_tokens,
            }
        return Forecast(start, hours, series)


def fit_history(history: HourlyHistory, events: Sequence[Event] = ()) -> HistoryFit:
    """Fit every alias of ``history`` (at least two weeks of it, outside event hours)."""
    mask = _event_mask(history.start, history.hours, events)
    if int((~mask).sum()) < MIN_TRAIN_H:
        raise InvalidRequest(
            f"the forecast needs at least {MIN_TRAIN_H} hours (two weeks) of history outside "
            f"marked events; it has {int((~mask).sum())}",
            param="history",
        )
    fits = {
        alias: {name: _fit_series(per[name], history.start, mask) for name in FIELDS}
        for alias, per in history.series.items()
    }
    total = history.total("requests")
    if float(total.sum()) <= 0:
        raise InvalidRequest("the history has no requests", param="history")
    base = np.zeros(history.hours)
    for per in fits.values():
        base += per["requests"].baseline(history.start, history.hours)
    measured: dict[str, float] = {}
    for ev in events:
        lo, hi = max(ev.start - history.start, 0), min(ev.end - history.start, history.hours)
        if lo < hi and float(base[lo:hi].sum()) > 0:
            measured[ev.name] = float(total[lo:hi].sum() / base[lo:hi].sum())
    how = hour_of_week(np.arange(history.start, history.start + history.hours))
    shape = np.array([base[how == k].mean() if np.any(how == k) else 0.0 for k in range(WEEK_H)])
    shape = shape / shape.mean() if shape.mean() > 0 else np.ones(WEEK_H)
    return HistoryFit(fits, list(events), measured, history.start + history.hours, shape)
