"""lm-eval-harness through the gateway: its tasks judge ``ALIAS@VERSION`` like our own suites.

`run_tasks` runs lm-eval-harness's ``local-chat-completions`` model against the gateway's
``/v1/chat/completions`` (so the real request path is what is judged), and `to_records` turns
its results into eval runs of the registry (one per task): ``suite`` ``lm-eval:<task>``, a
digest of the task's resolved config and the sample limit (runs are only compared on the same
task setup), the task's metrics (``exact_match``, ``acc``, ...; a filter other than ``none``
is kept as ``metric/filter``) and its samples as items (the first metric is the item's score).
Gate rules read those metrics like any other (``{metric: exact_match, min_delta: -0.01}``).

lm-eval-harness is an optional extra (``pip install 'fleetgate[lm-eval]'``), never required.

Example::

    results = run_tasks("http://127.0.0.1:4000", "sk-master", "chat@v8", ["gsm8k"], limit=200)
    for record in to_records(results, limit=200):
        ...  # POST /admin/registry/models/chat/versions/v8/evals
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetgate.extras import require

__all__ = ["run_tasks", "to_records"]


def run_tasks(
    url: str,
    key: str,
    target: str,
    tasks: Sequence[str],
    *,
    include_path: Path | None = None,
    limit: int | None = None,
    num_concurrent: int = 8,
    num_fewshot: int | None = None,
) -> dict[str, Any]:
    """lm-eval-harness's ``simple_evaluate`` on ``target`` through the gateway at ``url``."""
    lm_eval = require("lm_eval", extra="lm-eval", purpose="fleetgate eval lm-eval")
    tasks_mod = require("lm_eval.tasks", extra="lm-eval", purpose="fleetgate eval lm-eval")
    manager = tasks_mod.TaskManager(include_path=str(include_path) if include_path else None)
    endpoint = url.rstrip("/") + "/v1/chat/completions"
    model_args = {
        "base_url": endpoint, "model": target, "num_concurrent": num_concurrent,
        "max_retries": 3, "tokenized_requests": False,
        "header": {"Authorization": f"Bearer {key}"},
    }  # fmt: skip
    results: dict[str, Any] = lm_eval.simple_evaluate(
        model="local-chat-completions", model_args=model_args, tasks=list(tasks),
        task_manager=manager, apply_chat_template=True, log_samples=True, limit=limit,
        num_fewshot=num_fewshot,
    )  # fmt: skip
    return results


def _metric_name(key: str) -> str | None:
    name, _, flt = key.partition(",")
    if name in ("alias", "name", "sample_len", "samples") or not flt:
        return None
    return name if flt == "none" else f"{name}/{flt}"


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN: not measured


def to_records(results: dict[str, Any], *, limit: int | None = None) -> list[dict[str, Any]]:
    """One eval run (the body of ``POST .../evals``) per task of lm-eval ``results``."""
    records = []
    for task, values in sorted(results.get("results", {}).items()):
        metrics: dict[str, float] = {}
        for key, value in values.items():
            name, number = _metric_name(key), _number(value)
            if name is not None and number is not None:
                metrics[name] = number
        config = results.get("configs", {}).get(task, {})
        canonical = json.dumps({"config": config, "limit": limit}, sort_keys=True, default=str)
        first = next((m for m in metrics if not m.endswith("_stderr")), None)
        items = []
        for sample in results.get("samples", {}).get(task, []):
            score = _number(sample.get(first.partition("/")[0])) if first else None
            score = min(max(score or 0.0, 0.0), 1.0)
            resps = sample.get("filtered_resps") or sample.get("resps") or []
            output = resps[0] if resps else None
            while isinstance(output, list):
                output = output[0] if output else None
            items.append({
                "item_id": f"{task}:{sample.get('doc_id')}"[:200], "kind": "golden",
                "score": score, "passed": score >= 0.999,
                "output": None if output is None else str(output)[:100_000],
            })  # fmt: skip
        metrics["items"] = float(len(items) or values.get("sample_len", 0) or 0)
        records.append({
            "suite": f"lm-eval:{task}"[:200],
            "suite_digest": hashlib.sha256(canonical.encode()).hexdigest()[:32],
            "metrics": metrics, "comparison": None, "items": items,
        })  # fmt: skip
    return records
