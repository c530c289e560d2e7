"""deploy/epp: fleetgate as the picker of an existing gateway, rendered offline
(``kubectl kustomize``) and validated against the Kubernetes schemas (``kubernetes-validate``)
and the published CRD schemas (InferencePool v1, HTTPRoute v1); the objects agree with each
other, the config is fleetgate's, the command line is ``fleetgate epp``'s, and the picker may
read exactly what its pool watch reads (the Role) with the token it mounts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from fleetgate.cli.main import build_parser
from fleetgate.config.loader import parse_config
from fleetgate.epp.pool import GROUP, PLURAL, Endpoint
from fleetgate.epp.pool_follow import deployment_at, template_of

kv = pytest.importorskip("kubernetes_validate.utils", reason="pip install kubernetes-validate")

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) missing")
SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): Path(__file__).parent
    / "data/inferencepool-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): ROOT
    / "tests/deploy/data/gateway-api/httproute-v1.json",
}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "deploy/epp")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_every_object_validates_against_its_schema(docs: list[dict[str, Any]]) -> None:
    errors: list[str] = []
    for doc in docs:
        schema = SCHEMAS.get((doc["apiVersion"], doc["kind"]))
        if schema is not None:
            validator = jsonschema.Draft7Validator(json.loads(schema.read_text()))
            errors += [f"{doc['kind']}: {e.message}" for e in validator.iter_errors(doc)]
            continue
        for version in ("1.29.0", kv.latest_version()):
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                errors.append(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {exc}")
    assert errors == []
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "HTTPRoute", "InferencePool", "Role",
                     "RoleBinding", "Service", "ServiceAccount"]  # fmt: skip


def test_a_broken_pool_is_refused_by_the_published_schema() -> None:
    schema = json.loads(SCHEMAS[("inference.networking.k8s.io/v1", "InferencePool")].read_text())
    spec = {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}  # fmt: skip
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": "p"}, "spec": spec}  # fmt: skip
    validator = jsonschema.Draft7Validator(schema)
    assert list(validator.iter_errors(pool)) == []
    del spec["targetPorts"]
    assert ["'targetPorts' is a required property"] == [
        e.message for e in validator.iter_errors(pool)
    ]


def test_the_pool_route_service_and_picker_name_each_other(docs: list[dict[str, Any]]) -> None:
    pool, route = _one(docs, "InferencePool"), _one(docs, "HTTPRoute")
    service, deployment = _one(docs, "Service"), _one(docs, "Deployment")
    ref = pool["spec"]["endpointPickerRef"]
    assert ref["name"] == service["metadata"]["name"]
    grpc = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert ref["port"]["number"] == grpc["port"]
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    assert (backend["kind"], backend["name"]) == ("InferencePool", pool["metadata"]["name"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = build_parser().parse_args(container["args"])  # the real command line parses
    assert (args.command, args.grpc_port, args.port) == ("epp", ports["grpc"], ports["http"])
    assert args.lease_key  # two replicas: only the lease's leader is ready
    assert deployment["spec"]["replicas"] == 2
    probes = (container["readinessProbe"]["grpc"], container["livenessProbe"]["grpc"])
    assert [(p["service"], p["port"]) for p in probes] == [("readiness", 9002), ("liveness", 9002)]


def test_the_pickers_config_is_fleetgates_and_its_template_serves_the_pools_port(
    docs: list[dict[str, Any]],
) -> None:
    config = parse_config(yaml.safe_load(_one(docs, "ConfigMap")["data"]["config.yaml"]))
    pool = _one(docs, "InferencePool")
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.pool_name == pool["metadata"]["name"]
    assert args.pool_namespace == "$(POD_NAMESPACE)"  # the pool is in the picker's namespace
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    template = template_of(config, args.pool_alias)  # the alias has its one template
    port = pool["spec"]["targetPorts"][0]["number"]
    dep = deployment_at(template, Endpoint("engine-0", "10.0.0.7", port))
    assert dep.api_base == f"http://10.0.0.7:{port}/v1"


def test_the_picker_may_read_the_pool_and_its_pods_and_nothing_more(
    docs: list[dict[str, Any]],
) -> None:
    role, binding = _one(docs, "Role"), _one(docs, "RoleBinding")
    account, deployment = _one(docs, "ServiceAccount"), _one(docs, "Deployment")
    granted = {(g, r): sorted(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
    assert granted == {("", "pods"): ["get", "list", "watch"],
                       (GROUP, PLURAL): ["get", "list", "watch"]}  # fmt: skip
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    (subject,) = binding["subjects"]
    pod = deployment["spec"]["template"]["spec"]
    assert (subject["kind"], subject["name"]) == ("ServiceAccount", pod["serviceAccountName"])
    assert subject["namespace"] == role["metadata"]["namespace"] == "fleetgate"
    assert account["metadata"]["name"] == pod["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True  # the client reads the mounted token
    assert account["automountServiceAccountToken"] is True


def test_deploy_md_shows_the_picker_and_its_command_parses() -> None:
    text = (ROOT / "docs/deploy.md").read_text()
    assert "kubectl kustomize deploy/epp" in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("fleetgate epp ")]
    args = build_parser().parse_args(line.split()[1:])
    assert (args.command, args.response_body) == ("epp", "streamed")
