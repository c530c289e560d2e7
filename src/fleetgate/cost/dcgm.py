"""Read NVIDIA dcgm-exporter's Prometheus text into one `GpuSample` per GPU.

Understood series (dcgm-exporter's default counters; a GPU is told apart by its ``UUID``
label, else its ``gpu`` index)::

    DCGM_FI_DEV_GPU_UTIL           percent of time a kernel ran       -> util_pct
    DCGM_FI_PROF_GR_ENGINE_ACTIVE  ratio, profiling counter            -> util_pct when no GPU_UTIL
    DCGM_FI_DEV_FB_USED            MiB                                 -> fb_used_mib
    DCGM_FI_DEV_FB_FREE            MiB                                 -> fb_free_mib
    DCGM_FI_DEV_POWER_USAGE        W                                   -> power_w

Example::

    samples = parse_dcgm(text)
    samples[0].uuid, samples[0].util_pct      # "GPU-5fd4...", 37.0
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["GpuSample", "parse_dcgm"]

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
# A name starts where a run of name characters starts, and an unclosed value runs to the end of
# the line: retried at every position, either would rescan the rest of the line (quadratic).
_LABEL = re.compile(r'(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)(?:"|\\?$)')

_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "engine_active",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
}


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one scrape (``None``: the exporter did not report that field)."""

    uuid: str
    gpu: str
    model: str
    host: str
    util_pct: float | None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    pod: str = ""


def parse_dcgm(text: str) -> list[GpuSample]:
    """Every GPU of the exposition, in the order first seen; unknown lines are skipped."""
    gpus: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        if not line.startswith("DCGM_FI_"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, label_text, raw = match.groups()
        field = _FIELDS.get(name)
        try:
            value = float(raw)
        except ValueError:
            continue
        if field is None or math.isnan(value):
            continue
        labels = dict(_LABEL.findall(label_text or ""))
        key = labels.get("UUID") or f"gpu{labels.get('gpu', '?')}@{labels.get('Hostname', '')}"
        gpu = gpus.setdefault(key, {
            "uuid": key, "gpu": labels.get("gpu", ""), "model": labels.get("modelName", ""),
            "host": labels.get("Hostname", ""), "pod": labels.get("pod", ""),
        })  # fmt: skip
        gpu[field] = value
    out = []
    for g in gpus.values():
        util = g.pop("util_pct", None)
        active = g.pop("engine_active", None)
        if util is None and isinstance(active, float):
            util = active * 100.0
        out.append(GpuSample(util_pct=util, **g))  # type: ignore[arg-type]
    return out
