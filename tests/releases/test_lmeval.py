"""lm-eval-harness through the gateway (skipped where lm-eval is not installed: it is an
optional extra): a local task (JSONL data, exact match) judges ``chat@v1`` on the simulator,
and the run is stored on the version with its metric and per-sample items."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from fleetgate.cli.main import main
from fleetgate.releases.lmeval import to_records
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, registry_config, running_gateway, version_body

TASK = """task: fg_echo
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
"""


def test_to_records_reads_metrics_and_samples() -> None:
    results = {
        "results": {"t": {"alias": "t", "exact_match,none": 0.5, "exact_match_stderr,none": 0.1,
                          "acc,strict": 0.25, "bleu,none": "N/A"}},
        "configs": {"t": {"task": "t", "num_fewshot": 0}},
        "samples": {"t": [{"doc_id": 0, "exact_match": 1.0, "filtered_resps": [["Paris"]]},
                          {"doc_id": 1, "exact_match": 0.0, "filtered_resps": ["Oslo"]}]},
    }  # fmt: skip
    (record,) = to_records(results, limit=2)
    assert record["suite"] == "lm-eval:t" and len(record["suite_digest"]) == 32
    assert record["metrics"] == {"exact_match": 0.5, "exact_match_stderr": 0.1,
                                 "acc/strict": 0.25, "items": 2.0}  # fmt: skip
    assert [(i["item_id"], i["score"], i["output"]) for i in record["items"]] == [
        ("t:0", 1.0, "Paris"), ("t:1", 0.0, "Oslo")]  # fmt: skip
    assert to_records(results, limit=3)[0]["suite_digest"] != record["suite_digest"]


async def test_lm_eval_task_through_the_gateway(db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    data = tmp_path / "data.jsonl"
    rows = [("Paris", "Paris"), ("Rome", "Rome"), ("Oslo", "Lima")]
    data.write_text("".join(orjson.dumps({"question": q, "answer": a}).decode() + "\n"
                            for q, a in rows))  # fmt: skip
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "fg_echo.yaml").write_text(TASK.format(data=data))
    async with running_sim(SimConfig(mode="echo")) as sim:
        async with running_gateway(registry_config(sim), tmp_path / "gw", db_url) as gw:
            await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           json=version_body(sim, 1))  # fmt: skip
            argv = ["eval", "lm-eval", "--tasks", "fg_echo", "--include-path", str(tasks),
                    "--target", "chat@v1", "--concurrency", "2", "--url", gw.url,
                    "--key", MASTER, "-o", "json"]  # fmt: skip
            assert await asyncio.to_thread(main, argv) == 0
            status, runs = await gw.admin("GET", "/admin/registry/models/chat/versions/v1/evals")
            assert status == 200
            (run,) = runs["data"]
            assert run["suite"] == "lm-eval:fg_echo"
            assert (
                abs(run["metrics"]["exact_match"] - 2 / 3) < 1e-9 and run["metrics"]["items"] == 3
            )
            _, full = await gw.admin("GET", f"/admin/registry/evals/{run['id']}")
            assert sorted(i["score"] for i in full["items"]) == [0.0, 1.0, 1.0]
