"""``fleetgate safety eval`` against a real ``fleetgate serve`` (in front of ``fleetgate sim``).

A subset of the shipped red-team and benign sets (every sixth prompt, English and Chinese) goes
through the gateway over HTTP; the report must match what the same policy decides in-process,
by category and language.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate_training.safety import blocked_by, evaluate, shipped_set
from fleetgate_training.safety.evaluate import EvalPrompt
from tests.procs import serve_process, sim_process

MASTER = "sk-eval-master"
SAFETY: dict[str, Any] = {
    "checks": {"words": {"type": "words"}, "pii": {"type": "pii", "options": {"mode": "block"}}},
    "policies": {"default": {"input": ["words", "pii"]}},
    "audit": {"enabled": False},
}


def _subset(name: str, path: Path) -> list[EvalPrompt]:
    prompts = shipped_set(name)[::6]
    path.write_text(
        "".join(
            json.dumps(
                {"prompt": p.prompt, "category": p.category, "lang": p.lang}, ensure_ascii=False
            )
            + "\n"
            for p in prompts
        ),  # fmt: skip
        "utf-8",
    )
    return prompts


async def test_safety_eval_cli_through_a_real_gateway(tmp_path: Path) -> None:
    attacks = _subset("redteam", tmp_path / "attacks.jsonl")
    benign = _subset("benign", tmp_path / "benign.jsonl")
    assert {p.lang for p in attacks} == {"en", "zh"}
    policy = Guardrails(SafetyConfig.model_validate(SAFETY)).policy("default")
    expected = (await evaluate(attacks, benign, blocked_by(policy))).to_dict()
    assert 0 < expected["block_rate"] < 1  # the subset tells a good gateway from a bad one

    with sim_process("--mode", "echo") as sim_url:
        config: dict[str, object] = {
            "models": [{"alias": "echo", "deployments": [
                {"provider": "openai", "model": "tiny", "api_base": sim_url}]}],
            "multimodal": {"enabled": False},
            "safety": SAFETY,
        }  # fmt: skip
        with serve_process(config, tmp_path, master_key=MASTER) as (base_url, _proc):
            done = subprocess.run(
                [sys.executable, "-m", "fleetgate.cli.main", "safety", "eval",
                 "--attacks", str(tmp_path / "attacks.jsonl"),
                 "--benign", str(tmp_path / "benign.jsonl"),
                 "--base-url", base_url, "--api-key", MASTER, "--model", "echo", "--json"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["attacks"]["errors"] == report["benign"]["errors"] == 0
    assert report["block_rate"] == expected["block_rate"]
    assert report["false_positive_rate"] == expected["false_positive_rate"]
    assert report["attacks"]["by"] == expected["attacks"]["by"]
    assert {row["lang"] for row in report["attacks"]["by"]} == {"en", "zh"}
