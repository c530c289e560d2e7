"""The kustomize manifests: every documented overlay renders (``kubectl kustomize``, offline)
and validates against the Kubernetes schemas (``kubernetes-validate``), and the objects agree
with each other (selectors, ports, ConfigMaps, Secrets, the ServiceMonitor)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from fleetgate.cli.main import build_parser
from fleetgate.config.loader import load_config

kv = pytest.importorskip("kubernetes_validate.utils", reason="pip install kubernetes-validate")

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DOCS = (ROOT / "docs" / "operations.md").read_text()
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) missing")

OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if p.is_dir())
TARGETS = [f"overlays/{name}" for name in OVERLAYS] + ["migrate", "."]
# The oldest Kubernetes we promise (docs/operations.md) and the newest the schemas know.
VERSIONS = ("1.29.0", kv.latest_version())
CRDS = {"monitoring.coreos.com/v1", "gateway.networking.k8s.io/v1"}
# The Gateway API's published CRD schemas (v1, standard channel), kept as test data: see
# tests/deploy/data/gateway-api/README.md for where they come from and their licence.
GATEWAY_API = {
    kind: json.loads((ROOT / f"tests/deploy/data/gateway-api/{kind.lower()}-v1.json").read_text())
    for kind in ("Gateway", "HTTPRoute")
}


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
        if doc["apiVersion"] == "gateway.networking.k8s.io/v1":
            validator = jsonschema.Draft7Validator(GATEWAY_API[doc["kind"]])
            errors += [f"{doc['kind']}/{doc['metadata']['name']}: {e.message}"
                       for e in validator.iter_errors(doc)]  # fmt: skip
            continue
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
    assert OVERLAYS == ["production", "production-monitoring", "quickstart", "trial"]
    for target in TARGETS:
        assert f"deploy/kubernetes/{target}".removesuffix("/.") in DOCS, target


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
    (deployment,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "fleetgate"]
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
    replicas = {"trial": 1, "production": 3, "production-monitoring": 3, "quickstart": 2}[overlay]
    assert deployment["spec"]["replicas"] == replicas


def _secret_refs(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    refs = []
    for workload in by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet"):
        spec = workload["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    refs.append((ref["name"], ref["key"]))
    return refs


@pytest.mark.parametrize("overlay", ["trial", "quickstart"])
def test_the_secret_is_generated_in_the_cluster_with_every_key_referenced(overlay: str) -> None:
    docs = render(KUBE / "overlays" / overlay)
    assert by_kind(docs, "Secret") == []  # no key or password in the manifests
    (job,) = [j for j in by_kind(docs, "Job") if j["metadata"]["name"] == "fleetgate-secrets"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/example/fleetgate:0.1.0"
    args = build_parser().parse_args(container["args"])  # the CLI of this image accepts them
    assert args.command == "kube" and args.action == "ensure-secret" and args.name == "fleetgate"
    keys = {item.partition("=")[0] for item in args.generate + args.fixed}
    refs = _secret_refs(docs)
    assert refs and {name for name, _ in refs} == {"fleetgate"}
    assert {key for _, key in refs} <= keys
    assert any("{random}" in item for item in args.generate if item.startswith("master-key="))
    # the Job's service account may read that one Secret and create Secrets, nothing more
    (role,) = by_kind(docs, "Role")
    rules = {(tuple(r["verbs"]), tuple(r.get("resourceNames", ()))) for r in role["rules"]}
    assert rules == {(("get",), ("fleetgate",)), (("create",), ())}
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    stores = {s["metadata"]["name"] for s in by_kind(docs, "StatefulSet")}
    assert stores == {"fleetgate-redis", "fleetgate-postgres"}
    services = {s["metadata"]["name"] for s in by_kind(docs, "Service")}
    assert stores <= services
    for item in args.fixed:  # the URLs the Job writes name the bundled stores' Services
        host = urlsplit(item.partition("=")[2].replace("{postgres-password}", "p")).hostname
        assert host in services, item


def test_no_manifest_holds_a_key() -> None:
    texts = "\n".join(p.read_text() for p in KUBE.rglob("*.yaml"))
    assert "sk-trial" not in texts and "change-me" not in texts


def test_the_default_entry_point_answers_on_the_documented_engine() -> None:
    """`kubectl apply -k deploy/kubernetes` on an empty cluster: every Service the gateway's
    config names exists, selects the engine's pods on the port named, and the engine serves the
    model the config asks for; nothing needs a CRD."""
    docs = render(KUBE)
    assert {d["apiVersion"] for d in docs}.isdisjoint(CRDS)
    assert all(
        d["metadata"].get("namespace") == "fleetgate" for d in docs if d["kind"] != "Namespace"
    )
    deployment = _gateway(docs)
    config_maps = {c["metadata"]["name"]: c for c in by_kind(docs, "ConfigMap")}
    pod = deployment["spec"]["template"]
    (volume,) = [v for v in pod["spec"]["volumes"] if "configMap" in v]
    config = yaml.safe_load(config_maps[volume["configMap"]["name"]]["data"]["config.yaml"])
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    engines = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    checked = 0
    for model in config["models"]:
        for dep in model["deployments"]:
            url = urlsplit(dep["api_base"])
            service = services[str(url.hostname)]
            (port,) = [p for p in service["spec"]["ports"] if p["port"] == url.port]
            (engine,) = [e for e in engines.values()
                         if matches(service["spec"]["selector"],
                                    e["spec"]["template"]["metadata"]["labels"])]  # fmt: skip
            (vllm,) = engine["spec"]["template"]["spec"]["containers"]
            args = shlex.split(" ".join(vllm["args"]))
            assert args[args.index("--served-model-name") + 1] == dep["model"]
            assert port["targetPort"] in {p["name"] for p in vllm["ports"]}
            volumes = engine["spec"]["template"]["spec"]["volumes"]
            claims = {v["persistentVolumeClaim"]["claimName"] for v in volumes
                      if "persistentVolumeClaim" in v}  # fmt: skip
            assert claims <= {c["metadata"]["name"] for c in by_kind(docs, "PersistentVolumeClaim")}
            assert claims, "the model weights live on a volume that outlives the pod"
            checked += 1
    assert checked


def test_network_policies_let_the_gateway_and_no_one_else_reach_engines_and_stores() -> None:
    docs = render(KUBE)
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet")
    }
    policies = by_kind(docs, "NetworkPolicy")

    def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
        ok = matches(selector.get("matchLabels", {}), labels)
        for e in selector.get("matchExpressions", []):
            if e["operator"] == "Exists":
                ok = ok and e["key"] in labels
            else:
                assert e["operator"] == "In"
                ok = ok and labels.get(e["key"]) in e["values"]
        return ok

    def allowed(source: str, target: str) -> bool:
        guarding = [p for p in policies if selects(p["spec"]["podSelector"], pods[target])]
        assert guarding, f"{target} is not guarded"
        return any(
            "namespaceSelector" not in peer and selects(peer["podSelector"], pods[source])
            for p in guarding for rule in p["spec"]["ingress"] for peer in rule["from"]
        )  # fmt: skip

    for target in ("engine-chat", "fleetgate-redis", "fleetgate-postgres"):
        assert allowed("fleetgate", target)
        assert not allowed("engine-chat" if target != "engine-chat" else "fleetgate-redis", target)


def test_production_serves_https_through_the_gateway_api_and_autoscales() -> None:
    docs = render(KUBE / "overlays" / "production")
    (gateway,) = by_kind(docs, "Gateway")
    (listener,) = gateway["spec"]["listeners"]
    assert listener["protocol"] == "HTTPS" and listener["tls"]["certificateRefs"]
    (route,) = by_kind(docs, "HTTPRoute")
    assert route["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"]
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    service = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"] == backend["name"])
    assert backend["port"] in {p["port"] for p in service["spec"]["ports"]}
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == _gateway(docs)["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] == 3
    # the published schema refuses what a typo would produce
    broken = json.loads(json.dumps(route))
    broken["spec"]["rules"][0]["backendRefs"][0]["port"] = "http"
    assert validation_errors([broken])


def test_production_creates_no_secret_and_no_stores() -> None:
    docs = render(KUBE / "overlays" / "production")
    assert by_kind(docs, "Secret") == [] and by_kind(docs, "StatefulSet") == []
    assert by_kind(docs, "Job") == []  # the Secret is yours (or your secret operator's)
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
