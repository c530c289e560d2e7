"""A real HTTP server speaking the part of the Kubernetes API that `KubeLauncher` uses, for
tests with no cluster: Deployments (create, replace, read status, patch scale, delete) and
Services (create, delete) in namespaces, answered as the API server answers them (the created
object with ``metadata.uid`` / ``resourceVersion``; a deleted Deployment as a ``Status``, a
deleted Service as the object; a ``Status`` with 404 ``NotFound`` or 409 ``AlreadyExists``).
Pods are not run: a Deployment reports ``readyReplicas`` equal to its ``spec.replicas`` once
the test sets ``ready`` (what the kubelet and readiness probe would do). Every call is kept in
``calls`` as ``(method, path)``."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from fleetgate.http.serving import served

__all__ = ["FakeKubeApi", "fake_kube_api"]

_APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
_CORE = "/api/v1/namespaces/{ns}/services"


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


class FakeKubeApi:
    def __init__(self) -> None:
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        # every object ever created, as (kind, namespace, name, uid): a second instance shows
        self.created: list[tuple[str, str, str, str]] = []
        self.ready = False
        self._versions = itertools.count(1)
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_post(_APPS, self.create_deployment)
        app.router.add_put(_APPS + "/{name}", self.replace_deployment)
        app.router.add_get(_APPS + "/{name}/status", self.deployment_status)
        app.router.add_patch(_APPS + "/{name}/scale", self.scale_deployment)
        app.router.add_delete(_APPS + "/{name}", self.delete_deployment)
        app.router.add_post(_CORE, self.create_service)
        app.router.add_delete(_CORE + "/{name}", self.delete_service)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.calls.append((request.method, request.path))
        return await handler(request)  # type: ignore[no-any-return]

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming this server (no credentials: it asks for none)."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        return path

    def _stamp(self, obj: dict[str, Any], ns: str, uid: str | None = None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        meta["uid"] = uid or str(uuid.uuid4())
        meta["resourceVersion"] = str(next(self._versions))
        return obj

    def _with_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        replicas = int(obj["spec"].get("replicas", 1))
        ready = replicas if self.ready else 0
        obj["status"] = {"replicas": replicas, "readyReplicas": ready or None,
                         "availableReplicas": ready or None}  # fmt: skip
        return obj

    async def create_deployment(self, request: web.Request) -> web.Response:
        ns, obj = request.match_info["ns"], await request.json()
        key = (ns, obj["metadata"]["name"])
        if key in self.deployments:
            return _status(409, "AlreadyExists", f'deployments.apps "{key[1]}" already exists')
        self.deployments[key] = self._stamp(obj, ns)
        self.created.append(("Deployment", ns, key[1], obj["metadata"]["uid"]))
        return web.json_response(self._with_status(obj), status=201)

    async def replace_deployment(self, request: web.Request) -> web.Response:
        ns, name, obj = request.match_info["ns"], request.match_info["name"], await request.json()
        old = self.deployments.get((ns, name))
        if old is None:
            return _status(404, "NotFound", f'deployments.apps "{name}" not found')
        self.deployments[(ns, name)] = self._stamp(obj, ns, old["metadata"]["uid"])
        return web.json_response(self._with_status(obj))

    async def deployment_status(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = self.deployments.get((ns, name))
        if obj is None:
            return _status(404, "NotFound", f'deployments.apps "{name}" not found')
        return web.json_response(self._with_status(obj))

    async def scale_deployment(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = self.deployments.get((ns, name))
        if obj is None:
            return _status(404, "NotFound", f'deployments.apps "{name}" not found')
        obj["spec"]["replicas"] = int((await request.json())["spec"]["replicas"])
        replicas = obj["spec"]["replicas"]
        scale = {"kind": "Scale", "apiVersion": "autoscaling/v1",
                 "metadata": {"name": name, "namespace": ns},
                 "spec": {"replicas": replicas}, "status": {"replicas": 0}}  # fmt: skip
        return web.json_response(scale)

    async def delete_deployment(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if self.deployments.pop((ns, name), None) is None:
            return _status(404, "NotFound", f'deployments.apps "{name}" not found')
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Success"})  # fmt: skip

    async def create_service(self, request: web.Request) -> web.Response:
        ns, obj = request.match_info["ns"], await request.json()
        key = (ns, obj["metadata"]["name"])
        if key in self.services:
            return _status(409, "AlreadyExists", f'services "{key[1]}" already exists')
        self.services[key] = self._stamp(obj, ns)
        self.created.append(("Service", ns, key[1], obj["metadata"]["uid"]))
        return web.json_response(obj, status=201)

    async def delete_service(self, request: web.Request) -> web.Response:
        """A Service's DELETE answers with the deleted object (a Deployment's with a Status)."""
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = self.services.pop((ns, name), None)
        if obj is None:
            return _status(404, "NotFound", f'services "{name}" not found')
        return web.json_response(obj)


@asynccontextmanager
async def fake_kube_api() -> AsyncIterator[FakeKubeApi]:
    api = FakeKubeApi()
    async with served(api.app()) as url:
        api.url = url
        yield api
