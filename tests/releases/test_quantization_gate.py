"""The quantization gate end to end: ``fleetgate eval run`` drives the gateway with the
official openai SDK against simulated versions that corrupt a set fraction of answers; on a
golden suite of 240 items 1% corruption passes, 8% fails and 3% is inconclusive."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from fleetgate.cli.main import main as cli_main
from fleetgate.sim.config import SimConfig
from fleetgate.sim.generation import corrupted
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, registry_config, running_gateway, version_body

PROMPTS = [f"Item {i:03d}: the answer to question {i} is {i * 7 % 101}." for i in range(1, 241)]
GATES = {"chat": {"rules": [{"name": "quantization", "metric": "golden", "pass_drop": 0.02,
                             "fail_drop": 0.05, "baseline": "parent"}]}}  # fmt: skip
FRACTIONS = {"v2": 0.01, "v3": 0.08, "v4": 0.03}


def write_suite(path: Path) -> None:
    lines = [
        json.dumps(
            {
                "id": f"g-{i:03d}",
                "kind": "golden",
                "prompt": p,
                "expected": p,
                "scorer": "exact",
                "max_tokens": 64,
            }
        )  # fmt: skip
        for i, p in enumerate(PROMPTS, start=1)
    ]
    path.write_text("\n".join(lines) + "\n")


def test_the_simulator_corrupts_the_fraction_it_is_told() -> None:
    # what the gate below sees: the share of these prompts each simulated version gets wrong
    share = {v: sum(corrupted(p, f) != p for p in PROMPTS) / len(PROMPTS)
             for v, f in FRACTIONS.items()}  # fmt: skip
    assert share["v2"] < 0.02 and 0.02 <= share["v4"] <= 0.05 and share["v3"] > 0.05, share
    assert corrupted(PROMPTS[0], 0.0) == PROMPTS[0]
    assert corrupted(PROMPTS[0], 1.0) == corrupted(PROMPTS[0], 1.0) != PROMPTS[0]


async def test_quantization_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "golden.jsonl"
    write_suite(suite)
    async with AsyncExitStack() as stack:
        sims = {"v1": await stack.enter_async_context(running_sim(SimConfig(mode="echo")))}
        for version, fraction in FRACTIONS.items():
            config = SimConfig(mode="echo", corrupt_fraction=fraction)
            sims[version] = await stack.enter_async_context(running_sim(config))
        cfg = registry_config(sims["v1"], gates=GATES)
        gw = await stack.enter_async_context(running_gateway(cfg, tmp_path, None))
        await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
        for n, version in enumerate(("v1", "v2", "v3", "v4"), start=1):
            extra = {} if version == "v1" else {"parent_version": "v1", "quantization": "int4"}
            status, body = await gw.admin("POST", "/admin/registry/models/chat/versions",
                                          json=version_body(sims[version], n, **extra))  # fmt: skip
            assert status == 201 and body["version"] == version, body
        common = ["--url", gw.url, "--key", MASTER, "--suite", str(suite), "-o", "json"]

        def evaluate(target: str) -> dict[str, object]:
            assert cli_main(["eval", "run", "--target", target, "--concurrency", "16",
                             *common]) == 0  # fmt: skip
            return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]

        base = await asyncio.to_thread(evaluate, "chat@v1")
        assert base["metrics"]["golden"] == 1.0 and base["comparison"] is None  # type: ignore[index]
        status, body = await gw.admin("POST", "/admin/registry/models/chat/promote",
                                      json={"stage": "production", "version": "v1",
                                            "force": True})  # fmt: skip
        assert status == 200 and body["gate"] == "inconclusive"  # no parent to compare with
        verdicts = {}
        for version in FRACTIONS:
            result = await asyncio.to_thread(evaluate, f"chat@{version}")
            gate = result["gate"]
            assert isinstance(gate, dict)
            verdicts[version] = gate["verdict"]
            golden = result["comparison"]["kinds"]["golden"]  # type: ignore[index]
            assert golden["n"] == 240 and golden["baseline"] == 1.0
            assert golden["ci_low"] <= golden["delta"] <= golden["ci_high"] <= 0
        assert verdicts == {"v2": "pass", "v3": "fail", "v4": "inconclusive"}
        # a version whose answers clearly got worse has a CI that excludes zero
        status, runs = await gw.admin("GET", "/admin/registry/models/chat/versions/v3/evals")
        assert runs["data"][0]["comparison"]["kinds"]["golden"]["ci_high"] < 0
        status, run = await gw.admin("GET", f"/admin/registry/evals/{runs['data'][0]['id']}")
        wrong = [i for i in run["items"] if not i["passed"]]
        assert len(run["items"]) == 240
        assert {i["item_id"] for i in wrong} == {
            f"g-{n:03d}" for n, p in enumerate(PROMPTS, start=1) if corrupted(p, 0.08) != p
        }
        # promotion follows the gate: v2 goes to production, v3 is refused
        promote = "/admin/registry/models/chat/promote"
        status, body = await gw.admin("POST", promote, json={"stage": "production",
                                                             "version": "v3"})  # fmt: skip
        assert status == 409 and body["error"]["code"] == "gate_fail"
        status, body = await gw.admin("POST", promote, json={"stage": "production",
                                                             "version": "v2"})  # fmt: skip
        assert status == 200, body
