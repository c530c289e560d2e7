"""The simulator's Prometheus metrics, under vLLM's names with a ``model_name`` label."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable

from fleetgate.telemetry.registry import Counter, Gauge, Histogram, Registry

__all__ = ["SimMetrics"]

_TOKEN_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


class SimMetrics:
    """Metric families of one simulator; gauges read live engine state when rendered."""

    def __init__(self, registry: Registry, model: str) -> None:
        self.registry = registry
        self.model = model
        m = (model,)
        lbl = ["model_name"]
        self.running: Gauge = registry.gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", lbl
        )
        self.waiting: Gauge = registry.gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", lbl
        )
        self.kv_usage: Gauge = registry.gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lbl
        )
        self.cache_config: Gauge = registry.gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig.",
            ["model_name", "block_size", "num_gpu_blocks", "enable_prefix_caching"],
        )
        self.prefix_queries: Counter = registry.counter(
            "vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of tokens.", lbl
        )
        self.prefix_hits: Counter = registry.counter(
            "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of tokens.", lbl
        )
        self.preemptions: Counter = registry.counter(
            "vllm:num_preemptions_total", "Cumulative number of preemptions.", lbl
        )
        self.prompt_tokens: Counter = registry.counter(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", lbl
        )
        self.generation_tokens: Counter = registry.counter(
            "vllm:generation_tokens_total", "Number of generation tokens processed.", lbl
        )
        self.success: Counter = registry.counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            ["model_name", "finished_reason"],
        )
        self.cancelled: Counter = registry.counter(
            "fleetgate_sim_requests_cancelled_total",
            "Requests aborted because the client disconnected.",
            lbl,
        )
        self.faults: Counter = registry.counter(
            "fleetgate_sim_faults_injected_total",
            "Injected faults by kind.",
            ["model_name", "kind"],
        )
        self.ttft: Histogram = registry.histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lbl
        )
        self.itl: Histogram = registry.histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lbl,
            _TOKEN_LATENCY_BUCKETS,
        )
        self.tpot: Histogram = registry.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            lbl,
            _TOKEN_LATENCY_BUCKETS,
        )
        self.e2e: Histogram = registry.histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lbl
        )
        self.queue_time: Histogram = registry.histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            lbl,
        )
        # vLLM's Prometheus client exports the process's memory under this name (the gate's
        # memory per version reads it with vllm:kv_cache_usage_perc)
        self.resident_memory: Gauge = registry.gauge(
            "process_resident_memory_bytes", "Resident memory size in bytes."
        )
        self.resident_memory.set_collector(lambda: [((), float(_resident_bytes()))])
        # Pre-create children so every series is present from the first scrape.
        for counter in (
            self.prefix_queries,
            self.prefix_hits,
            self.preemptions,
            self.prompt_tokens,
            self.generation_tokens,
            self.cancelled,
        ):
            counter.labels(*m)
        for reason in ("stop", "length", "abort"):
            self.success.labels(model, reason)
        for hist in (self.ttft, self.itl, self.tpot, self.e2e, self.queue_time):
            hist.labels(*m)

    def bind(
        self,
        *,
        running: Callable[[], int],
        waiting: Callable[[], int],
        kv_usage: Callable[[], float],
        block_size: int,
        num_blocks: int,
    ) -> None:
        """Connect the gauges to the engine's live state."""
        m = (self.model,)
        self.running.set_collector(lambda: [(m, float(running()))])
        self.waiting.set_collector(lambda: [(m, float(waiting()))])
        self.kv_usage.set_collector(lambda: [(m, kv_usage())])
        self.cache_config.labels(self.model, str(block_size), str(num_blocks), "True").set(1.0)


def _resident_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; else the peak from getrusage)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
