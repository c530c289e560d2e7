"""`KubeLauncher`: a version's engines as one Deployment and one Service on Kubernetes.

`render_objects` turns a registry entry into the two objects, starting from the engine base
manifests (``deploy/kubernetes/engines/base/deployment.yaml`` and ``service.yaml``): names
``engine-<model>-<version>[-<role>]`` (DNS-1123), labels ``fleetgate.io/model``,
``fleetgate.io/version``, ``fleetgate.io/role`` and the Kueue queue and priority class of the
role, the replicas asked for, and the container's arguments from the version's serve command
(vLLM's image takes the arguments of ``vllm serve``; a simulator build runs ``fleetgate sim`` in
the fleetgate image). The gateway reaches the engines at the Service's cluster DNS name.

The launcher applies them with the official ``kubernetes`` client (``pip install
'fleetgate[kube]'``) when a cluster is configured (in-cluster, or a kubeconfig): created, or
replaced when they exist; scaled by patching ``spec.replicas``; stopped by deleting both.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from fleetgate.errors import UpstreamConnectError
from fleetgate.extras import require
from fleetgate.releases.launchers.base import Engines, Record, serve_spec

__all__ = ["KubeLauncher", "object_name", "render_objects"]

_PORT = 8000
# Kueue's WorkloadPriorityClasses by role (`fleetgate kube kueue`): a pipeline's temporary
# instance is evaluation, production engines production inference
_PRIORITY = {"eval": "evaluation", "production": "production-inference"}


def object_name(model: str, version: str, role: str) -> str:
    """``engine-<model>-<version>[-<role>]`` as a DNS-1123 label (63 characters at most)."""
    raw = f"engine-{model}-{version}" + ("" if role == "production" else f"-{role}")
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    return name[:63].rstrip("-")


def _container_args(version: Mapping[str, Any]) -> tuple[list[str] | None, list[str]]:
    """(command, args) of the engine container."""
    spec = serve_spec(version)
    if spec.kind == "sim":
        argv = spec.with_address("0.0.0.0", _PORT)  # noqa: S104 - inside the pod
        return argv, []
    argv = spec.argv[2:] if spec.argv[:2] == ["vllm", "serve"] else spec.argv
    model, rest = (argv[0], argv[1:]) if argv and not argv[0].startswith("-") else ("", argv)
    args = (["--model", model] if model else []) + rest
    return None, [*args, "--served-model-name", spec.served_model, "--port", str(_PORT)]


def render_objects(
    version: Mapping[str, Any],
    base_dir: Path,
    *,
    role: str,
    replicas: int,
    namespace: str | None = None,
    fleetgate_image: str = "ghcr.io/fleetgate/fleetgate:latest",
    queue: str | None = None,
) -> list[dict[str, Any]]:
    """The Deployment and Service serving ``version`` in ``role``, from the base manifests."""
    deployment = yaml.safe_load((base_dir / "deployment.yaml").read_text())
    service = yaml.safe_load((base_dir / "service.yaml").read_text())
    model, name = str(version["model"]), str(version["version"])
    obj = object_name(model, name, role)
    labels = {
        "app.kubernetes.io/name": obj, "app.kubernetes.io/part-of": "fleetgate",
        "fleetgate.io/model": _label(model), "fleetgate.io/version": _label(name),
        "fleetgate.io/role": role, "fleetgate.io/pool": _label(model),
        "kueue.x-k8s.io/priority-class": _PRIORITY.get(role, "evaluation"),
    }  # fmt: skip
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    deployment["metadata"] = {"name": obj, "labels": dict(labels)}
    spec = deployment["spec"]
    spec["replicas"] = replicas
    spec["selector"] = {"matchLabels": {"app.kubernetes.io/name": obj}}
    pod = spec["template"]
    pod["metadata"] = {"labels": dict(labels)}
    container = pod["spec"]["containers"][0]
    command, args = _container_args(version)
    if command is not None:
        container["name"] = "engine"
        container["image"] = fleetgate_image
        container["command"] = command
        container.pop("args", None)
        container.pop("resources", None)  # the simulator needs no GPU
        pod["spec"].pop("tolerations", None)
    else:
        container["args"] = args
        tp = int(version.get("tensor_parallel") or 1)
        resources = copy.deepcopy(container.get("resources", {}))
        for part in ("requests", "limits"):
            resources.setdefault(part, {})["nvidia.com/gpu"] = str(tp)
        container["resources"] = resources
    for volume in pod["spec"].get("volumes", []):
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = f"engine-{_label(model)}-models"
    service_labels = {"app.kubernetes.io/name": obj, "fleetgate.io/version": _label(name)}
    service["metadata"] = {"name": obj, "labels": service_labels}
    service["spec"]["selector"] = {"app.kubernetes.io/name": obj}
    if namespace:
        deployment["metadata"]["namespace"] = service["metadata"]["namespace"] = namespace
    return [deployment, service]


def _label(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.") or "x"


class KubeLauncher:
    """Applies `render_objects` through the Kubernetes API (blocking client calls run in a
    thread)."""

    def __init__(
        self,
        base_dir: Path,
        *,
        namespace: str = "default",
        fleetgate_image: str = "ghcr.io/fleetgate/fleetgate:latest",
        start_timeout_s: float = 1200.0,
        api_client: Any = None,
    ) -> None:
        self.base_dir = base_dir
        self.namespace = namespace
        self.fleetgate_image = fleetgate_image
        self.start_timeout_s = start_timeout_s
        self._client = api_client

    def _api(self) -> Any:
        if self._client is None:
            k8s = require("kubernetes", extra="kube", purpose="the Kubernetes launcher")
            try:
                k8s.config.load_incluster_config()
            except k8s.config.ConfigException:
                k8s.config.load_kube_config()
            self._client = k8s.client.ApiClient()
        return self._client

    def _url(self, version: Mapping[str, Any], role: str) -> str:
        name = object_name(str(version["model"]), str(version["version"]), role)
        return f"http://{name}.{self.namespace}.svc.cluster.local:{_PORT}/v1"

    async def start(
        self,
        version: Mapping[str, Any],
        *,
        role: str,
        replicas: int = 1,
        record: Record | None = None,
    ) -> Engines:
        objects = render_objects(version, self.base_dir, role=role, replicas=replicas,
                                 namespace=self.namespace,
                                 fleetgate_image=self.fleetgate_image)  # fmt: skip
        name = objects[0]["metadata"]["name"]
        engines = Engines(str(version["model"]), str(version["version"]), role,
                          [self._url(version, role)], replicas, {"name": name})  # fmt: skip
        if record is not None:  # the objects' name, before they exist
            await record(engines)
        await asyncio.to_thread(self._apply, objects)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout_s
        while loop.time() < deadline:
            if await self.healthy(engines):
                return engines
            await asyncio.sleep(5.0)
        await self.stop(engines)
        raise UpstreamConnectError(f"{name} was not ready within {self.start_timeout_s:g} s")

    async def resume(
        self,
        version: Mapping[str, Any],
        engines: Engines,
        *,
        replicas: int,
        record: Record | None = None,
    ) -> Engines:
        """Applying is idempotent (created, or replaced where they exist): start again."""
        return await self.start(version, role=engines.role, replicas=replicas, record=record)

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        k8s = require("kubernetes", extra="kube", purpose="the Kubernetes launcher")
        api = self._api()
        apps, core = k8s.client.AppsV1Api(api), k8s.client.CoreV1Api(api)
        deployment, service = objects
        name = deployment["metadata"]["name"]
        try:
            apps.create_namespaced_deployment(self.namespace, deployment)
        except k8s.client.ApiException as exc:
            if exc.status != 409:
                raise
            apps.replace_namespaced_deployment(name, self.namespace, deployment)
        try:
            core.create_namespaced_service(self.namespace, service)
        except k8s.client.ApiException as exc:
            if exc.status != 409:
                raise

    async def healthy(self, engines: Engines) -> bool:
        k8s = require("kubernetes", extra="kube", purpose="the Kubernetes launcher")
        apps = k8s.client.AppsV1Api(self._api())
        try:
            status = await asyncio.to_thread(
                apps.read_namespaced_deployment_status, engines.detail["name"], self.namespace
            )
        except k8s.client.ApiException:
            return False
        return int(status.status.ready_replicas or 0) >= engines.replicas > 0

    async def scale(
        self, engines: Engines, replicas: int, *, record: Record | None = None
    ) -> Engines:
        """Patches ``spec.replicas`` (idempotent: nothing to record)."""
        k8s = require("kubernetes", extra="kube", purpose="the Kubernetes launcher")
        apps = k8s.client.AppsV1Api(self._api())
        await asyncio.to_thread(
            apps.patch_namespaced_deployment_scale, engines.detail["name"], self.namespace,
            {"spec": {"replicas": replicas}},
        )  # fmt: skip
        return Engines(engines.model, engines.version, engines.role, engines.urls, replicas,
                       engines.detail)  # fmt: skip

    async def stop(self, engines: Engines) -> None:
        k8s = require("kubernetes", extra="kube", purpose="the Kubernetes launcher")
        api = self._api()
        name = engines.detail["name"]
        for delete in (k8s.client.AppsV1Api(api).delete_namespaced_deployment,
                       k8s.client.CoreV1Api(api).delete_namespaced_service):  # fmt: skip
            try:
                await asyncio.to_thread(delete, name, self.namespace)
            except k8s.client.ApiException as exc:
                if exc.status != 404:
                    raise
