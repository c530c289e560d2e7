from __future__ import annotations

import pytest

from fleetgate.telemetry.registry import Registry


def test_exposition_format() -> None:
    reg = Registry()
    reqs = reg.counter("x_requests_total", "Requests.", ["alias", "status"])
    reqs.labels("a", "200").inc()
    reqs.labels("a", "200").inc(2)
    reqs.labels('we"ird\n', "500").inc()
    hist = reg.histogram("x_seconds", "Latency.", ["alias"], buckets=[0.1, 1.0])
    hist.labels("a").observe(0.05)
    hist.labels("a").observe(0.5)
    hist.labels("a").observe(5)
    gauge = reg.gauge("x_in_flight", "In flight.", ["d"])
    gauge.set_collector(lambda: [(("d1",), 3.0)])
    text = reg.render().decode()
    assert "# TYPE x_requests_total counter" in text
    assert 'x_requests_total{alias="a",status="200"} 3' in text
    assert 'x_requests_total{alias="we\\"ird\\n",status="500"} 1' in text
    assert 'x_seconds_bucket{alias="a",le="0.1"} 1' in text
    assert 'x_seconds_bucket{alias="a",le="1"} 2' in text
    assert 'x_seconds_bucket{alias="a",le="+Inf"} 3' in text
    assert 'x_seconds_sum{alias="a"} 5.55' in text
    assert 'x_seconds_count{alias="a"} 3' in text
    assert 'x_in_flight{d="d1"} 3' in text


def test_label_count_is_checked_and_names_unique() -> None:
    reg = Registry()
    c = reg.counter("y_total", "Y.", ["a"])
    with pytest.raises(ValueError):
        c.labels("1", "2")
    with pytest.raises(ValueError):
        reg.counter("y_total", "again")


def test_observing_a_value_several_times_at_once_is_observing_it_one_by_one() -> None:
    reg = Registry()
    hist = reg.histogram("z_seconds", "Gaps.", ["alias"], buckets=[0.01, 1.0])
    one_by_one, at_once = hist.labels("a"), hist.labels("b")
    for value, times in ((0.0, 3), (0.5, 2), (7.0, 1)):
        for _ in range(times):
            one_by_one.observe(value)
        at_once.observe_times(value, times)
    assert at_once.counts == one_by_one.counts == [3, 2, 1]
    assert at_once.sum == one_by_one.sum == 8.0
    assert at_once.count == one_by_one.count == 6
