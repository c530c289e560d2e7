"""A small, fast Prometheus metric registry.

Built for one asyncio event loop: no locks, label children cached in a dict, and the text
exposition format rendered on demand. Each `create_app` owns one `Registry`; nothing is global.

Example::

    reg = Registry()
    reqs = reg.counter("fleetgate_requests_total", "Requests.", ["alias", "status"])
    reqs.labels("fast-small", "200").inc()
    ttft = reg.histogram("fleetgate_ttft_seconds", "Time to first token.", ["alias"])
    ttft.labels("fast-small").observe(0.12)
    text = reg.render()
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "DEFAULT_LATENCY_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "Metric",
    "Registry",
]

DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _label_str(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class _HistogramValue:
    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def observe_times(self, value: float, times: int) -> None:
        """``observe(value)`` ``times`` times in one step (a relay's events that arrived
        together are all 0 s apart)."""
        self.counts[bisect_left(self.buckets, value)] += times
        self.sum += value * times
        self.count += times


class Metric:
    """A metric family: a name, help text, label names and one child per label values."""

    kind = "untyped"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}

    def _new_child(self) -> object:
        raise NotImplementedError

    def _child(self, values: tuple[str, ...]) -> object:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
            child = self._children[values] = self._new_child()
        return child

    def snapshot(self) -> list[tuple[list[str], object]]:
        """The children as plain data (for merging across worker processes)."""
        out: list[tuple[list[str], object]] = []
        for values, child in self._children.items():
            if isinstance(child, _HistogramValue):
                out.append((list(values), [list(child.counts), child.sum, child.count]))
            elif isinstance(child, _Value):
                out.append((list(values), child.value))
        return out

    def merge(self, samples: Iterable[tuple[list[str], object]]) -> None:
        """Add another process's snapshot into this family (counters, histograms: sums)."""
        for values, data in samples:
            child = self._child(tuple(values))
            if isinstance(child, _HistogramValue) and isinstance(data, list):
                counts, total, count = data
                if len(counts) == len(child.counts):
                    child.counts = [a + b for a, b in zip(child.counts, counts, strict=True)]
                    child.sum += float(total)
                    child.count += int(count)
            elif isinstance(child, _Value) and isinstance(data, int | float):
                child.value += float(data)

    def remove(self, *values: str) -> None:
        """Drop one child (e.g. a deployment that left the config)."""
        self._children.pop(tuple(values), None)

    def clear(self) -> None:
        self._children.clear()

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.documentation}"
        yield f"# TYPE {self.name} {self.kind}"
        yield from self._render_samples()

    def _render_samples(self) -> Iterable[str]:
        for values, child in self._children.items():
            assert isinstance(child, _Value)
            yield f"{self.name}{_label_str(self.labelnames, values)} {_fmt(child.value)}"


class Counter(Metric):
    kind = "counter"

    def _new_child(self) -> _Value:
        return _Value()

    def labels(self, *values: str) -> _Value:
        # the dict first: a request looks up several children, each one existing already
        child = self._children.get(values)
        if child is None:
            child = self._child(values)
        return child  # type: ignore[return-value]  # made by _new_child: no check per call

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class Gauge(Counter):
    """A value that goes up and down; optionally computed at render time by a callback."""

    kind = "gauge"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        self._collector: Callable[[], Iterable[tuple[tuple[str, ...], float]]] | None = None

    def set_collector(self, fn: Callable[[], Iterable[tuple[tuple[str, ...], float]]]) -> None:
        """Compute the samples when rendered, e.g. in-flight counts read from live objects."""
        self._collector = fn

    def set(self, value: float) -> None:
        self.labels().set(value)

    def snapshot(self) -> list[tuple[list[str], object]]:
        if self._collector is not None:
            return [(list(values), value) for values, value in self._collector()]
        return super().snapshot()

    def _render_samples(self) -> Iterable[str]:
        if self._collector is not None:
            for values, value in self._collector():
                yield f"{self.name}{_label_str(self.labelnames, values)} {_fmt(value)}"
            return
        yield from super()._render_samples()


class Histogram(Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self.buckets = tuple(sorted(float(b) for b in buckets if b != math.inf))

    def _new_child(self) -> _HistogramValue:
        return _HistogramValue(self.buckets)

    def labels(self, *values: str) -> _HistogramValue:
        child = self._children.get(values)  # as Counter.labels
        if child is None:
            child = self._child(values)
        return child  # type: ignore[return-value]

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def _render_samples(self) -> Iterable[str]:
        for values, child in self._children.items():
            assert isinstance(child, _HistogramValue)
            cumulative = 0
            for bound, count in zip((*self.buckets, math.inf), child.counts, strict=True):
                cumulative += count
                le = f'le="{_fmt(bound)}"'
                yield f"{self.name}_bucket{_label_str(self.labelnames, values, le)} {cumulative}"
            labels = _label_str(self.labelnames, values)
            yield f"{self.name}_sum{labels} {_fmt(child.sum)}"
            yield f"{self.name}_count{labels} {child.count}"


class Registry:
    """Owns metric families and renders them in the Prometheus text format (0.0.4)."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def _add(self, metric: Metric) -> Metric:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Counter:
        metric = self._add(Counter(name, documentation, labelnames))
        assert isinstance(metric, Counter)
        return metric

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Gauge:
        metric = self._add(Gauge(name, documentation, labelnames))
        assert isinstance(metric, Gauge)
        return metric

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
    ) -> Histogram:
        metric = self._add(Histogram(name, documentation, labelnames, buckets))
        assert isinstance(metric, Histogram)
        return metric

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def families(self) -> tuple[Metric, ...]:
        """Every registered family, in registration order (dashboards are checked against it)."""
        return tuple(self._metrics.values())

    def snapshot(self) -> dict[str, list[tuple[list[str], object]]]:
        """Every family's samples as plain data (JSON-serialisable)."""
        return {name: metric.snapshot() for name, metric in self._metrics.items()}

    def render_merged(self, others: Iterable[dict[str, list[tuple[list[str], object]]]]) -> bytes:
        """Render this registry plus other processes' snapshots, summed.

        Gauges are summed too (in-flight requests add up across workers); callback gauges
        are rendered from this process only when no snapshot carries them.
        """
        merged = Registry()
        for name, metric in self._metrics.items():
            copy: Metric
            if isinstance(metric, Histogram):
                copy = Histogram(name, metric.documentation, metric.labelnames, metric.buckets)
            elif isinstance(metric, Gauge):
                copy = Gauge(name, metric.documentation, metric.labelnames)
            else:
                copy = Counter(name, metric.documentation, metric.labelnames)
            copy.merge(metric.snapshot())
            merged._metrics[name] = copy
        for snap in others:
            for name, samples in snap.items():
                target = merged._metrics.get(name)
                if target is not None:
                    target.merge(samples)
        return merged.render()

    def render(self) -> bytes:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.render())
        lines.append("")
        return "\n".join(lines).encode()
