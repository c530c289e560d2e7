"""The engine pool manifests (deploy/kubernetes/engines): both autoscaling variants render and
validate offline, the autoscalers target the engine Deployment, and every query they scale on
names a metric that vLLM (as the simulator exports it) or the gateway exports."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from fleetgate.cli.monitoring import metric_catalog
from tests.deploy.test_kubernetes import KUBE, KUBECTL, by_kind, matches, render, validation_errors

DEPLOY_MD = (KUBE.parents[1] / "docs" / "deploy.md").read_text()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) missing")

VARIANTS = ["keda", "hpa"]
ENGINE_CRDS = {"keda.sh/v1alpha1", "monitoring.coreos.com/v1"}


def _engine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    return deployment


@pytest.mark.parametrize("variant", VARIANTS)
def test_renders_validates_and_is_documented(variant: str) -> None:
    docs = render(KUBE / "engines" / variant)
    core = [d for d in docs if d["apiVersion"] not in ENGINE_CRDS]
    assert validation_errors(core) == []
    assert f"deploy/kubernetes/engines/{variant}" in DEPLOY_MD
    engine = _engine(docs)
    pod = engine["spec"]["template"]
    assert matches(engine["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    (service,) = by_kind(docs, "Service")
    assert matches(service["spec"]["selector"], pod["metadata"]["labels"])
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (vllm,) = pod["spec"]["containers"]
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in vllm["env"]  # sleep mode routes
    assert "--enable-sleep-mode" in vllm["args"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_keda_scales_the_engine_to_zero_on_the_signals_that_matter() -> None:
    docs = render(KUBE / "engines" / "keda")
    (scaled,) = by_kind(docs, "ScaledObject")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == _engine(docs)["metadata"]["name"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    catalog = metric_catalog()
    queries = []
    for trigger in spec["triggers"]:
        assert trigger["type"] == "prometheus"
        meta = trigger["metadata"]
        assert float(meta["threshold"]) > 0
        assert catalog.problems(meta["query"]) == [], meta["query"]
        queries.append(meta["query"])
    named = " ".join(queries)
    for metric in ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "fleetgate_held_requests", "fleetgate_scheduling_queue_depth",
                   "fleetgate_in_flight_requests"):  # fmt: skip
        assert metric in named, metric
    # scale from zero needs a signal that is above 0 while requests are held
    demand = next(
        t for t in spec["triggers"] if "fleetgate_held_requests" in t["metadata"]["query"]
    )
    assert demand["metadata"]["activationThreshold"] == "0"


def test_a_wrong_metric_in_a_query_is_caught() -> None:
    catalog = metric_catalog()
    assert catalog.problems("sum(vllm:num_requests_waitin)")
    assert catalog.problems('sum(fleetgate_held_requests{pool="chat"})')  # label it lacks


def _adapter_rules(text: str) -> list[dict[str, Any]]:
    """The prometheus-adapter rules block of docs/deploy.md."""
    match = re.search(r"```yaml\n(# prometheus-adapter rules.*?)```", text, flags=re.S)
    assert match is not None, "docs/deploy.md has no prometheus-adapter rules block"
    rules: list[dict[str, Any]] = yaml.safe_load(match.group(1))["rules"]["external"]
    return rules


def test_hpa_metrics_come_from_the_adapter_rules_in_deploy_md() -> None:
    docs = render(KUBE / "engines" / "hpa")
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == _engine(docs)["metadata"]["name"]
    rules = {r["name"]["as"]: r for r in _adapter_rules(DEPLOY_MD)}
    catalog = metric_catalog()
    for metric in hpa["spec"]["metrics"]:
        external = metric["external"]["metric"]
        rule = rules[external["name"]]
        assert catalog.problems(rule["seriesQuery"]) == [], rule["seriesQuery"]
        matchers = ",".join(f'{k}="{v}"' for k, v in external["selector"]["matchLabels"].items())
        query = rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers)
        assert catalog.problems(query) == [], query
