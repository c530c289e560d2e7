"""Kueue objects rendered from the gateway's config (``fleetgate kube kueue``): valid against
Kueue's published CRD schemas, one ClusterQueue per team with its GPU quota, a Cohort per org,
priority classes in the documented order, and preemption that lets production inference take
GPUs back from experimental training only."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from fleetgate.cli.main import main
from fleetgate.scheduling.kueue import PRIORITIES, engine_labels

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {
    kind: json.loads((ROOT / f"tests/deploy/data/kueue/{kind.lower()}-v1beta2.json").read_text())
    for kind in ("ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass")
}
CONFIG = {
    "models": [{"alias": "chat", "deployments": [
        {"model": "m", "api_base": "http://127.0.0.1:9/v1"}]}],
    "scheduling": {
        "orgs": {"retail": {"quota": {"concurrency": {"nominal": 256}}}},
        "teams": {
            "team_search": {"org": "retail", "quota": {"concurrency": {
                "nominal": 128, "borrowing_limit": 64, "lending_limit": 32}}},
            "team_ads": {"org": "retail", "quota": {"concurrency": {"nominal": 100}}},
            "team_lab": {"band": "batch"},  # no quota, no org: it only borrows
        },
        "kueue": {"gpus_per_slot": 0.015625,  # 1 GPU per engine of max_num_seqs 64
                  "flavor": "h100", "flavor_node_labels": {"nvidia.com/gpu.product": "H100"},
                  "namespaces": {"team_search": "search"}},
    },
}  # fmt: skip


def _render(tmp_path: Path, config: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    path, out = tmp_path / "config.yaml", tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["kube", "kueue", "--config", str(path), "--output", str(out)])
    docs = list(yaml.safe_load_all(out.read_text())) if out.exists() else []
    return code, [d for d in docs if d]


def _errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMAS[doc["kind"]])
    return [f"{doc['kind']}/{doc['metadata']['name']}: {e.message}"
            for e in validator.iter_errors(doc)]  # fmt: skip


def test_the_objects_are_valid_and_follow_the_config(tmp_path: Path) -> None:
    code, docs = _render(tmp_path, CONFIG)
    assert code == 0
    assert [e for d in docs for e in _errors(d)] == []
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    search = by[("ClusterQueue", "team-search")]["spec"]
    (gpu,) = search["resourceGroups"][0]["flavors"][0]["resources"]
    assert search["resourceGroups"][0]["flavors"][0]["name"] == "h100"
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 1,
                   "lendingLimit": 1}  # 128, 64, 32 slots at 1/64 GPU each  # fmt: skip
    ads = by[("ClusterQueue", "team-ads")]["spec"]
    assert ads["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 2  # 100/64
    assert search["cohortName"] == ads["cohortName"] == "retail"
    cohort = by[("Cohort", "retail")]["spec"]
    assert cohort["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 4
    lab = by[("ClusterQueue", "team-lab")]["spec"]
    assert lab["cohortName"] == "fleetgate" and ("Cohort", "fleetgate") in by
    assert lab["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 0
    assert by[("LocalQueue", "team-search")]["metadata"]["namespace"] == "search"
    assert by[("LocalQueue", "team-lab")]["metadata"]["namespace"] == "team-lab"
    assert by[("LocalQueue", "team-ads")]["spec"]["clusterQueue"] == "team-ads"
    assert by[("ResourceFlavor", "h100")]["spec"]["nodeLabels"] == {
        "nvidia.com/gpu.product": "H100"
    }
    values = [by[("WorkloadPriorityClass", p)]["value"] for p in PRIORITIES]
    assert values == sorted(values, reverse=True) and len(set(values)) == 3
    training = by[("WorkloadPriorityClass", "experimental-training")]["value"]
    for team in ("team-search", "team-ads", "team-lab"):
        preemption = by[("ClusterQueue", team)]["spec"]["preemption"]
        assert preemption["reclaimWithinCohort"] == "Any"
        assert preemption["withinClusterQueue"] == "LowerPriority"
        assert preemption["borrowWithinCohort"] == {"policy": "LowerPriority",
                                                    "maxPriorityThreshold": training}  # fmt: skip
    # an engine labelled for a team lands in a queue that exists, at a class that exists
    labels = engine_labels("team_search")
    assert ("LocalQueue", labels["kueue.x-k8s.io/queue-name"]) in by
    assert ("WorkloadPriorityClass", labels["kueue.x-k8s.io/priority-class"]) in by


def test_the_schemas_catch_a_broken_object(tmp_path: Path) -> None:
    _, docs = _render(tmp_path, CONFIG)
    queue = next(d for d in docs if d["kind"] == "ClusterQueue")
    queue["spec"]["preemption"]["withinClusterQueue"] = "Sometimes"
    queue["spec"]["queueingStrategy"] = 3
    errors = _errors(queue)
    assert any("'Sometimes' is not one of" in e for e in errors)
    assert any("3 is not one of ['StrictFIFO', 'BestEffortFIFO']" in e for e in errors)


@pytest.mark.parametrize(
    ("kueue", "message"),
    [
        (None, "no scheduling.kueue section"),
        ({"gpus_per_slot": 0}, "gpus_per_slot"),
        ({"gpus_per_slot": 1, "priorities": [100, 500, 1000]}, "production inference >"),
    ],
)
def test_a_config_without_what_kueue_needs_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kueue: Any, message: str
) -> None:
    config = json.loads(json.dumps(CONFIG))
    if kueue is None:
        del config["scheduling"]["kueue"]
    else:
        config["scheduling"]["kueue"] = kueue
    code, _ = _render(tmp_path, config)
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) missing")
def test_the_engine_component_puts_engines_in_a_queue(tmp_path: Path) -> None:
    """deploy/kubernetes/components/kueue labels every engine pool's pods as
    `engine_labels` names a team's queue and the production-inference class."""
    kube = ROOT / "deploy" / "kubernetes"
    overlay = kube / f".test-kueue-{tmp_path.name}"
    overlay.mkdir()
    try:
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "resources: [../engines/base]\ncomponents: [../components/kueue]\n"
        )
        out = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True,
                             text=True, timeout=60, check=True).stdout  # fmt: skip
    finally:
        shutil.rmtree(overlay)
    (engine,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    labels = engine["spec"]["template"]["metadata"]["labels"]
    queue = labels["kueue.x-k8s.io/queue-name"]
    assert {k: labels[k] for k in engine_labels(queue)} == engine_labels(queue)
