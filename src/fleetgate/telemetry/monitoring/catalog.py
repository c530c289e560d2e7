"""The metrics a dashboard or alert may name: what the gateway, vLLM and DCGM-exporter export.

The gateway's and the engine's families come from live ``Registry`` objects (the CLI builds the
gateway's parts and a simulator to fill them), so a renamed or removed metric breaks generation
instead of leaving an empty panel. DCGM-exporter is not ours: its default counters
(``etc/default-counters.csv`` in NVIDIA/dcgm-exporter) are listed here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleetgate.telemetry.monitoring.promql import names
from fleetgate.telemetry.registry import Metric

__all__ = ["DCGM_METRICS", "SCRAPE_LABELS", "Catalog", "MetricInfo"]

# Labels Prometheus adds to every scraped series (target labels of a ServiceMonitor/PodMonitor).
SCRAPE_LABELS = frozenset({"instance", "job", "namespace", "pod", "container", "service"})

_DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
DCGM_METRICS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
}


@dataclass(frozen=True)
class MetricInfo:
    name: str
    kind: str  # counter, gauge, histogram
    help: str
    labels: frozenset[str]
    source: str  # gateway, vllm, dcgm


class Catalog:
    """Metric families by name, with the series names a histogram adds (_bucket, _sum, _count)."""

    def __init__(self, metrics: Iterable[MetricInfo]) -> None:
        self.metrics = {m.name: m for m in metrics}

    @classmethod
    def build(cls, gateway: Iterable[Metric], engine: Iterable[Metric]) -> Catalog:
        infos = [_info(m, "gateway") for m in gateway]
        infos += [_info(m, "vllm") for m in engine if m.name.startswith("vllm:")]
        infos += [
            MetricInfo(name, "gauge", text, frozenset(_DCGM_LABELS), "dcgm")
            for name, text in DCGM_METRICS.items()
        ]
        return cls(infos)

    def family(self, series: str) -> MetricInfo | None:
        """The family a series name belongs to (``x_bucket`` of histogram ``x`` is ``x``)."""
        if series in self.metrics:
            return self.metrics[series]
        for suffix in ("_bucket", "_sum", "_count"):
            base = self.metrics.get(series.removesuffix(suffix))
            if series.endswith(suffix) and base is not None and base.kind == "histogram":
                return base
        return None

    def problems(self, expr: str) -> list[str]:
        """What is wrong with ``expr``: unknown metrics, labels none of its metrics carry."""
        found = names(expr)
        if not found.metrics:
            return [f"names no metric: {expr}"]
        errors: list[str] = []
        allowed = set(SCRAPE_LABELS)
        for series in sorted(found.metrics):
            info = self.family(series)
            if info is None:
                errors.append(f"unknown metric {series!r} in: {expr}")
                continue
            allowed |= info.labels
            if series.endswith("_bucket"):
                allowed.add("le")
        for label in sorted(found.labels - allowed):
            errors.append(f"label {label!r} is on none of the metrics of: {expr}")
        return errors

    def check(self, expr: str) -> str:
        """``expr`` if it passes, else ValueError naming every problem."""
        errors = self.problems(expr)
        if errors:
            raise ValueError("; ".join(errors))
        return expr


def _info(metric: Metric, source: str) -> MetricInfo:
    return MetricInfo(
        metric.name, metric.kind, metric.documentation, frozenset(metric.labelnames), source
    )
