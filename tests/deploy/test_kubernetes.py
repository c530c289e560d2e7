"""The kustomize manifests: every documented overlay renders (``kubectl kustomize``, offline)
and validates against the Kubernetes schemas (``kubernetes-validate``), and the objects agree
with each other (selectors, ports, ConfigMaps, Secrets, the ServiceMonitor)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.config.loader import load_config

kv = pytest.importorskip("kubernetes_validate.utils", reason="pip install kubernetes-validate")

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DOCS = (ROOT / "docs" / "operations.md").read_text()
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) missing")

OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if p.is_dir())
TARGETS = [f"overlays/{name}" for name in OVERLAYS] + ["migrate"]
# The oldest Kubernetes we promise (docs/operations.md) and the newest the schemas know.
VERSIONS = ("1.29.0", kv.latest_version())
CRDS = {"monitoring.coreos.com/v1"}


def render(target: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(target)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def validation_errors(docs: list[dict[str, Any]]) -> list[str]:
    errors = []
    for doc in docs:
        if doc["apiVersion"] in CRDS:
            continue  # checked structurally below
        for version in VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                errors.append(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {exc}")
    return errors


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_overlay_is_documented() -> None:
    assert OVERLAYS == ["production", "production-monitoring", "trial"]
    for target in TARGETS:
        assert f"deploy/kubernetes/{target}" in DOCS, target


@pytest.mark.parametrize("target", TARGETS)
def test_renders_and_validates(target: str) -> None:
    docs = render(KUBE / target)
    assert docs
    assert validation_errors(docs) == []
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        if spec is None or (doc["metadata"]["name"] != "fleetgate" and target != "migrate"):
            continue  # the bundled stores run their own images
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert container["image"] == "ghcr.io/example/fleetgate:0.1.0"
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def _gateway(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    return deployment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_objects_agree(overlay: str, tmp_path: Path) -> None:
    docs = render(KUBE / "overlays" / overlay)
    deployment = _gateway(docs)
    pod = deployment["spec"]["template"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert matches(selector, pod["metadata"]["labels"])
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert matches(pdb["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    service = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "fleetgate")
    assert matches(service["spec"]["selector"], pod["metadata"]["labels"])
    (gateway,) = pod["spec"]["containers"]
    ports = {p["name"] for p in gateway["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert gateway["readinessProbe"]["httpGet"]["path"].startswith("/health/ready")
    assert gateway["readinessProbe"]["httpGet"]["port"] in ports
    anti = pod["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert gateway["resources"]["requests"] and gateway["resources"]["limits"]
    assert pod["spec"]["initContainers"][0]["args"] == ["db", "migrate"]
    # The mounted ConfigMap is rendered, and is a config the gateway accepts.
    config_maps = {c["metadata"]["name"]: c for c in by_kind(docs, "ConfigMap")}
    (volume,) = [v for v in pod["spec"]["volumes"] if "configMap" in v]
    config_text = config_maps[volume["configMap"]["name"]]["data"]["config.yaml"]
    (tmp_path / "config.yaml").write_text(config_text)
    assert load_config(tmp_path / "config.yaml").models[0].alias == "chat"
    replicas = {"trial": 1, "production": 3, "production-monitoring": 3}[overlay]
    assert deployment["spec"]["replicas"] == replicas


def test_trial_brings_its_stores_and_a_secret_for_every_reference() -> None:
    docs = render(KUBE / "overlays" / "trial")
    (secret,) = by_kind(docs, "Secret")
    keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    refs = []
    for workload in by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet"):
        spec = workload["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.append((ref["name"], ref["key"]))
    assert refs and {name for name, _ in refs} == {secret["metadata"]["name"]}
    assert {key for _, key in refs} <= keys
    stores = {s["metadata"]["name"] for s in by_kind(docs, "StatefulSet")}
    assert stores == {"fleetgate-redis", "fleetgate-postgres"}
    services = {s["metadata"]["name"] for s in by_kind(docs, "Service")}
    assert stores <= services


def test_production_creates_no_secret_and_no_stores() -> None:
    docs = render(KUBE / "overlays" / "production")
    assert by_kind(docs, "Secret") == [] and by_kind(docs, "StatefulSet") == []
    assert by_kind(docs, "ServiceMonitor") == []


def test_monitoring_objects_point_at_the_gateway() -> None:
    docs = render(KUBE / "overlays" / "production-monitoring")
    (monitor,) = by_kind(docs, "ServiceMonitor")
    service = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "fleetgate")
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])
    (rule,) = by_kind(docs, "PrometheusRule")
    alerts = yaml.safe_load((ROOT / "deploy" / "monitoring" / "alerts.yaml").read_text())
    assert rule["spec"] == alerts
    boards = [
        c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == "fleetgate-dashboards"
    ]
    assert boards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert len(boards[0]["data"]) == 4


def test_validation_catches_a_broken_manifest() -> None:
    docs = render(KUBE / "overlays" / "production")
    deployment = _gateway(docs)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = [
        1
    ]
    deployment["spec"]["replicas"] = "three"
    errors = validation_errors([deployment])
    assert errors and all(e.startswith("Deployment/fleetgate") for e in errors)
