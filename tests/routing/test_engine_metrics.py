"""Reading vLLM (current and older names) and SGLang metrics, and the simulator's real output."""

from __future__ import annotations

import aiohttp

from fleetgate.routing.engine_metrics import parse_engine_metrics
from fleetgate.sim import SimConfig, running_sim

VLLM_V1 = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 3.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 2.0
vllm:num_requests_running{engine="0",model_name="llama"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.42
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 600.0
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",num_gpu_blocks="2048"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="llama"} 5.0
"""

VLLM_V0 = """\
vllm:num_requests_waiting{model_name="old"} 1.0
vllm:num_requests_running{model_name="old"} 4.0
vllm:gpu_cache_usage_perc{model_name="old"} 0.9
vllm:gpu_prefix_cache_queries_total{model_name="old"} 50.0
vllm:gpu_prefix_cache_hits_total{model_name="old"} 10.0
"""

SGLANG = """\
sglang:num_queue_reqs{model_name="qwen"} 6
sglang:num_running_reqs{model_name="qwen"} 12
sglang:token_usage{model_name="qwen"} 0.73
sglang:cache_hit_rate{model_name="qwen"} 0.31
"""


def test_current_vllm_names_are_summed_over_series() -> None:
    snap = parse_engine_metrics(VLLM_V1)
    assert snap.engine == "vllm"
    assert (snap.waiting, snap.running, snap.kv_usage) == (5.0, 7.0, 0.42)
    assert (snap.prefix_queries, snap.prefix_hits) == (1000.0, 600.0)
    assert (snap.block_size, snap.num_blocks) == (16, 2048)


def test_older_gpu_prefixed_vllm_names() -> None:
    snap = parse_engine_metrics(VLLM_V0)
    assert snap.engine == "vllm"
    assert (snap.waiting, snap.running, snap.kv_usage) == (1.0, 4.0, 0.9)
    assert (snap.prefix_queries, snap.prefix_hits) == (50.0, 10.0)


def test_sglang_names() -> None:
    snap = parse_engine_metrics(SGLANG)
    assert snap.engine == "sglang"
    assert (snap.waiting, snap.running, snap.kv_usage, snap.hit_rate) == (6, 12, 0.73, 0.31)


def test_unknown_text_is_not_an_engine() -> None:
    snap = parse_engine_metrics("# nothing\nprocess_cpu_seconds_total 3\nvllm:broken{ x\n")
    assert not snap.known
    assert snap.waiting == 0.0


async def test_reads_the_simulators_own_metrics() -> None:
    config = SimConfig(kv_blocks=64, block_size=16, output_len=2)
    async with running_sim(config) as url, aiohttp.ClientSession() as http:
        body = {"messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 2}
        for _ in range(2):
            async with http.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
        async with http.get(f"{url}/metrics") as resp:
            snap = parse_engine_metrics(await resp.text())
    assert snap.engine == "vllm"
    assert (snap.block_size, snap.num_blocks) == (16, 64)
    assert snap.prefix_hits is not None and snap.prefix_hits > 0
    assert snap.prefix_queries is not None and snap.prefix_queries > snap.prefix_hits
