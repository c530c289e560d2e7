"""The release pipeline end to end, no person involved: versions registered on a gateway
process, each launched, judged through the gateway and released or stopped on its own.

- v1 (no production yet): temporary instance, suites, gate passed, promoted;
- v2 (a good build): rolled out progressively on live traffic and promoted; v1's engines kept;
- v3 (``--corrupt-fraction 0.08``): stopped at the gate, production untouched;
- v4 (right for 1500 tokens, wrong after): passes golden, fails the long-generation suite;
- a rollback to v1 afterwards is a traffic shift (no engine started), measured.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.releases.pipeline_support import (
    GatewayProcess,
    Traffic,
    free_port,
    gateway_config,
    sim_version,
    step_seconds,
    write_suites,
)


def engine_logs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data" / "engines").iterdir())


async def test_pipeline_releases_good_builds_and_stops_bad_ones(tmp_path: Path) -> None:
    golden, long = write_suites(tmp_path)
    gw = GatewayProcess(tmp_path, gateway_config(golden, long))
    ports = {n: free_port() for n in (1, 2, 3, 4)}
    await gw.start()
    timings: dict[str, dict[str, float]] = {}
    try:
        assert (await gw.admin("POST", "/admin/registry/models", {"name": "chat"}))[0] == 201
        status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                      sim_version(1, ports[1]))  # fmt: skip
        assert status == 201, body
        run = await gw.wait_run("v1", ("released", "failed", "stopped"))
        assert run["status"] == "released", run
        timings["v1"] = step_seconds(run)
        assert [s["name"] for s in run["steps"]] == [
            "instance_up",
            "suites",
            "gate",
            "instance_down",
            "production_up",
            "rollout",
            "keep",
        ]
        _, stages = await gw.admin("GET", "/admin/registry/models/chat")
        assert stages["stages"]["production"] == "v1"
        memory = run["steps"][1]["detail"]["memory"]
        assert memory["memory_rss_bytes"] > 10e6  # read from the engine's metrics
        async with Traffic(gw.url) as traffic:
            await gw.admin("POST", "/admin/registry/models/chat/versions", sim_version(2, ports[2]))
            run = await gw.wait_run("v2", ("released", "failed", "stopped", "rolled_back"))
            assert run["status"] == "released", (run["reason"], run["steps"][-1])
            timings["v2"] = step_seconds(run)
            assert run["gate"]["verdict"] == "pass"
            assert run["steps"][5]["detail"]["baseline"] == "v1"  # a progressive rollout
            _, rollout = await gw.admin("GET", "/admin/registry/rollouts/chat")
            assert rollout["status"] == "completed" and rollout["candidate"] == "v2"
            assert run["steps"][6]["detail"]["kept"] == ["v2", "v1"]
            assert not [s for s in traffic.seen if s[1] != 200]

            # a bad build: stopped at the gate; production serves v2 throughout
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           sim_version(3, ports[3], "--corrupt-fraction", "0.08"))  # fmt: skip
            run = await gw.wait_run("v3", ("released", "failed", "stopped", "rolled_back"))
            assert run["status"] == "stopped", run
            timings["v3"] = step_seconds(run)
            assert "golden" in run["reason"] and run["engines"] == {}
            rules = {r["metric"]: r for r in run["gate"]["rules"]}
            assert rules["golden"]["verdict"] == "fail" and rules["golden"]["candidate"] < 0.95
            # a build that goes wrong only past 1500 tokens: golden passes, drift fails
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           sim_version(4, ports[4], "--corrupt-fraction", "1",
                                       "--corrupt-after-tokens", "1500"))  # fmt: skip
            run = await gw.wait_run("v4", ("released", "failed", "stopped", "rolled_back"))
            timings["v4"] = step_seconds(run)
            rules = {r["metric"]: r for r in run["gate"]["rules"]}
            assert run["status"] == "stopped", run
            assert rules["golden"]["verdict"] == "pass" and rules["golden"]["candidate"] == 1.0
            assert rules["drift_agreement"]["verdict"] == "fail"
            assert 0.6 < rules["drift_agreement"]["candidate"] < 0.8  # 1500 of ~2100 words
            _, model = await gw.admin("GET", "/admin/registry/models/chat")
            assert model["stages"]["production"] == "v2"
            late = [s for s in traffic.seen if s[0] > traffic.seen[0][0]]
            assert all(code == 200 for _, code, _ in late)

            # rollback: v1's engines are still up, so it is a traffic shift
            logs = engine_logs(tmp_path)
            began = time.monotonic()
            status, _ = await gw.admin("POST", "/admin/registry/models/chat/rollback", {})
            assert status == 200
            while time.monotonic() - began < 10:
                recent = [s for s in traffic.seen if s[0] > began]
                if len(recent) >= 5 and all("v1" in d for _, _, d in recent[-5:]):
                    break
                await asyncio.sleep(0.05)
            after = [s for s in traffic.seen if s[0] > began]
            first_v1 = next(t for t, _, d in after if "v1" in d)
            shift_s = first_v1 - began
            await asyncio.sleep(1.0)
            tail = [s for s in traffic.seen if s[0] > first_v1 + 0.5]
            assert tail and all("v1" in d and code == 200 for _, code, d in tail), tail[:5]
            assert shift_s < 2.0, shift_s
            assert engine_logs(tmp_path) == logs  # no engine started on the way
        status, audit = await gw.admin("GET", "/admin/audit?kind=admin&limit=500")
        if status == 200:  # tenancy keeps an admin audit log: every step is in it
            actions = {row["action"] for row in audit["data"]}
            assert {"pipeline.suites.done", "pipeline.gate.done", "pipeline.keep.done"} <= actions
        print(f"\nstep seconds: {timings}\nrollback traffic shift: {shift_s:.3f} s")
    finally:
        await _stop_all(gw)


async def test_sigkill_mid_suite_resumes_and_finishes_once(tmp_path: Path) -> None:
    golden, _ = write_suites(tmp_path, golden_items=48, max_tokens=48)
    gw = GatewayProcess(tmp_path, gateway_config(golden, None, release="gate", concurrency=4))
    port = free_port()
    await gw.start()
    try:
        await gw.admin("POST", "/admin/registry/models", {"name": "chat"})
        slow = sim_version(1, port, "--decode-ms-per-step", "15")  # ~0.7 s an item
        assert (await gw.admin("POST", "/admin/registry/models/chat/versions", slow))[0] == 201
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            status, run = await gw.admin("GET", "/admin/pipelines/chat/v1")
            if status == 200 and run["steps"] and run["steps"][-1]["name"] == "suites":
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)  # in the middle of the suite
        await gw.kill()
        killed_owner = run["steps"][-1]["by"]
        await gw.start()
        run = await gw.wait_run("v1", ("passed", "failed", "stopped"))
        assert run["status"] == "passed", (run["reason"], run["steps"])
        names = [s["name"] for s in run["steps"]]
        assert names == ["instance_up", "suites", "gate", "instance_down"]  # each once
        suites = run["steps"][1]
        assert suites["by"] == killed_owner and suites["resumed"] != [killed_owner]
        assert len(suites["resumed"]) == 1  # taken over once, by the restarted gateway
        _, evals = await gw.admin("GET", "/admin/registry/models/chat/versions/v1/evals")
        suites = [r["suite"] for r in evals["data"]]
        assert sorted(suites) == ["golden.jsonl", "memory"], suites  # one set of results
        print(f"\nstep seconds after the restart: {step_seconds(run)}")
    finally:
        await _stop_all(gw)


async def _stop_all(gw: GatewayProcess) -> None:
    """The gateway, then the engines its runs launched (engines outlive a gateway by design)."""
    from fleetgate.releases.launchers import Engines, LocalLauncher

    runs: list[dict[str, object]] = []
    if gw.proc is not None and gw.proc.returncode is None:
        status, body = await gw.admin("GET", "/admin/pipelines")
        runs = body["data"] if status == 200 else []
    await gw.stop()
    launcher = LocalLauncher(gw.root, stop_timeout_s=5)
    for run in runs:
        engines = run["engines"]
        assert isinstance(engines, dict)
        for launched in engines.values():
            await launcher.stop(Engines.from_dict(launched))
