"""The forecast fit on a held-out synthetic history (another seed and shape than the benchmark)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.plan.events import BusinessLine, Event
from fleetgate.plan.forecast import MONTH_H, fit_history, seasonal_naive, wape
from fleetgate.plan.history import parse_hour
from fleetgate.plan.synthetic import default_week_shape, synthetic_history

START = parse_hour("2025-09-01T00:00:00Z")  # a Monday
# a daytime office shape, quiet weekends: unlike the benchmark's evening peak
SHAPE = default_week_shape(weekend=0.3, night=0.05, evening_peak=14)


def _history(**kw: object) -> tuple[object, list[Event]]:
    events = [("launch", 40, 2, 3.0), ("black-friday", 140, 2, 2.0)]
    args: dict[str, object] = dict(start=START, days=150, requests_per_hour=500.0,
                                   growth_per_month=0.15, week_shape=SHAPE, seed=2024,
                                   events=events)  # fmt: skip
    args.update(kw)
    return synthetic_history(**args)  # type: ignore[arg-type]


def test_fit_recovers_growth_and_beats_seasonal_naive_on_held_out_month() -> None:
    history, events = _history()
    train = history.window(START, 4 * MONTH_H)  # type: ignore[attr-defined]
    test = history.window(START + 4 * MONTH_H, history.hours - 4 * MONTH_H)  # type: ignore[attr-defined]
    fit = fit_history(train, events)
    assert fit.growth_per_month()["chat"] == pytest.approx(0.15, abs=0.03)
    assert fit.measured["launch"] == pytest.approx(3.0, rel=0.1)
    # black-friday lies in the test window: no multiplier given, it takes launch's measured one
    fc = fit.forecast(test.start, test.hours).total("requests")
    actual = test.total("requests")
    err, naive = wape(fc, actual), wape(seasonal_naive(train.total("requests"), test.hours), actual)
    assert err < 0.15
    assert err < 0.8 * naive


def test_linear_trend_is_still_within_twenty_percent() -> None:
    history, events = _history(linear=True, growth_per_month=0.1, seed=5)
    train = history.window(START, 4 * MONTH_H)  # type: ignore[attr-defined]
    test = history.window(START + 4 * MONTH_H, MONTH_H)  # type: ignore[attr-defined]
    fc = fit_history(train, events).forecast(test.start, MONTH_H).total("input_tokens")
    assert wape(fc, test.total("input_tokens")) < 0.2


def test_unmarked_promotion_is_fitted_as_ordinary_traffic_and_costs_accuracy() -> None:
    history, events = _history(events=[("launch", 40, 6, 4.0)], seed=9)
    train = history.window(START, 4 * MONTH_H)  # type: ignore[attr-defined]
    marked = fit_history(train, events).growth_per_month()["chat"]
    unmarked = fit_history(train, []).growth_per_month()["chat"]
    assert abs(marked - 0.15) < abs(unmarked - 0.15)


def test_future_event_multiplier_given_and_business_line_added() -> None:
    history, events = _history()
    fit = fit_history(history, events)  # type: ignore[arg-type]
    end = history.start + history.hours  # type: ignore[attr-defined]
    holiday = Event("holiday", end + 48, end + 72, kind="holiday", multiplier=0.5)
    fit.events.append(holiday)
    line = BusinessLine("bot", end + 24 * 7, requests_per_day=24_000, input_tokens=100,
                        output_tokens=10, ramp_days=7)  # fmt: skip
    fc = fit.forecast(end, 30 * 24, [line])
    base = fit.fits["chat"]["requests"].baseline(end, 30 * 24)
    chat = fc.series["chat"]["requests"]
    assert np.allclose(chat[48:72], base[48:72] * 0.5)
    assert np.allclose(chat[:48], base[:48])
    bot = fc.series["line:bot"]["requests"]
    assert bot[: 24 * 7].sum() == 0
    # fully ramped after a week: about 24,000 a day
    assert bot[24 * 14 : 24 * 21].sum() / 7 == pytest.approx(24_000, rel=0.1)
    assert fc.series["line:bot"]["input_tokens"].sum() == pytest.approx(bot.sum() * 100)


def test_too_short_history_is_a_clear_error() -> None:
    history, _ = synthetic_history(start=START, days=10, seed=1)
    with pytest.raises(InvalidRequest, match="two weeks"):
        fit_history(history)
    with pytest.raises(InvalidRequest, match="at least one week"):
        seasonal_naive(np.ones(100), 10)
