"""Read an inference engine's Prometheus ``/metrics`` text into one `EngineSnapshot`.

Understood names (every series of a family is summed, so several ``model_name`` labels add up):

=====================  =========================================  ==============================
what                   vLLM (current, then older ``gpu_`` names)  SGLang
=====================  =========================================  ==============================
waiting requests       ``vllm:num_requests_waiting``              ``sglang:num_queue_reqs``
running requests       ``vllm:num_requests_running``              ``sglang:num_running_reqs``
KV cache in use (0-1)  ``vllm:kv_cache_usage_perc``,              ``sglang:token_usage``
                       ``vllm:gpu_cache_usage_perc``
prefix cache queries   ``vllm:prefix_cache_queries_total``,       --
                       ``vllm:gpu_prefix_cache_queries_total``
prefix cache hits      ``vllm:prefix_cache_hits_total``,          --
                       ``vllm:gpu_prefix_cache_hits_total``
prefix hit rate        (from the counters)                        ``sglang:cache_hit_rate``
block size, blocks     ``vllm:cache_config_info`` labels          --
                       ``block_size``, ``num_gpu_blocks``
=====================  =========================================  ==============================

Only lines of these families are split, so a large exposition (histograms) costs little.

Example::

    snap = parse_engine_metrics(text)
    snap.engine, snap.waiting, snap.kv_usage   # "vllm", 3.0, 0.42
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["EngineSnapshot", "parse_engine_metrics"]

# family name -> (field, engine)
_FAMILIES: dict[str, tuple[str, str]] = {
    "vllm:num_requests_waiting": ("waiting", "vllm"),
    "vllm:num_requests_running": ("running", "vllm"),
    "vllm:kv_cache_usage_perc": ("kv_usage", "vllm"),
    "vllm:gpu_cache_usage_perc": ("kv_usage", "vllm"),
    "vllm:prefix_cache_queries_total": ("prefix_queries", "vllm"),
    "vllm:prefix_cache_queries": ("prefix_queries", "vllm"),
    "vllm:gpu_prefix_cache_queries_total": ("prefix_queries", "vllm"),
    "vllm:gpu_prefix_cache_queries": ("prefix_queries", "vllm"),
    "vllm:prefix_cache_hits_total": ("prefix_hits", "vllm"),
    "vllm:prefix_cache_hits": ("prefix_hits", "vllm"),
    "vllm:gpu_prefix_cache_hits_total": ("prefix_hits", "vllm"),
    "vllm:gpu_prefix_cache_hits": ("prefix_hits", "vllm"),
    "vllm:cache_config_info": ("cache_config", "vllm"),
    "sglang:num_queue_reqs": ("waiting", "sglang"),
    "sglang:num_running_reqs": ("running", "sglang"),
    "sglang:token_usage": ("kv_usage", "sglang"),
    "sglang:cache_hit_rate": ("hit_rate", "sglang"),
}
_PREFIXES = ("vllm:", "sglang:")


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One scrape of one engine. ``engine`` is ``""`` when no known family was present."""

    engine: str = ""
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    hit_rate: float | None = None
    block_size: int | None = None
    num_blocks: int | None = None
    at: float = 0.0  # time.monotonic() of the scrape

    @property
    def known(self) -> bool:
        """Whether the text came from an engine we understand."""
        return self.engine != ""


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if sep:
            out[name.strip()] = value.strip().strip('"')
    return out


def _split(line: str) -> tuple[str, str, float] | None:
    """(family, label text, value) of a sample line, or None if it isn't one."""
    brace = line.find("{")
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            return None
        name, labels, rest = line[:brace], line[brace + 1 : close], line[close + 1 :]
    else:
        name, _, rest = line.partition(" ")
        labels = ""
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return name.strip(), labels, value


def parse_engine_metrics(text: str, at: float = 0.0) -> EngineSnapshot:
    """Sum the known families of a Prometheus text exposition; unknown lines are skipped."""
    sums: dict[str, float] = {}
    engine = ""
    block_size: int | None = None
    num_blocks: int | None = None
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        sample = _split(line)
        if sample is None:
            continue
        name, labels, value = sample
        known = _FAMILIES.get(name)
        if known is None or math.isnan(value):
            continue
        field, engine = known
        if field == "cache_config":
            info = _labels(labels)
            if info.get("block_size", "").isdigit():
                block_size = int(info["block_size"])
            blocks = info.get("num_gpu_blocks", "")
            if blocks.isdigit():
                num_blocks = (num_blocks or 0) + int(blocks)
            continue
        if field in ("hit_rate", "kv_usage"):
            sums[field] = max(sums.get(field, 0.0), value)
            continue
        sums[field] = sums.get(field, 0.0) + value
    usage = sums.get("kv_usage", 0.0)
    return EngineSnapshot(
        engine=engine,
        waiting=sums.get("waiting", 0.0),
        running=sums.get("running", 0.0),
        kv_usage=min(1.0, usage / 100.0 if usage > 1.0 else usage),
        prefix_queries=sums.get("prefix_queries"),
        prefix_hits=sums.get("prefix_hits"),
        hit_rate=sums.get("hit_rate"),
        block_size=block_size,
        num_blocks=num_blocks,
        at=at,
    )
