"""A real HTTP server speaking the part of the Kubernetes API the pool watcher reads, for tests
with no cluster: Pods (list, watch) and InferencePools (get, list, watch) in namespaces.

Answered as the API server answers: a list carries ``metadata.resourceVersion``; ``?watch=true``
streams newline-delimited JSON events (``ADDED`` / ``MODIFIED`` / ``DELETED`` with the object,
each stamped with its resourceVersion) after ``resourceVersion``, until ``timeoutSeconds``; a
``labelSelector`` (``a=b,c=d``) and a ``fieldSelector`` of ``metadata.name=`` filter. A watch
from a version older than the history kept (`compact`) gets one ``ERROR`` event carrying a
``410 Gone`` Status, as etcd's compaction makes the real one answer. The test edits the objects
(`put_pod`, `delete_pod`, `put_pool`, `delete_pool`), ends the open watches (`end_watches`),
stops the server and starts it again on the same port (`stop`, `start`: the API unreachable).
Every request is kept in ``calls`` as ``(path, query)``. `threaded_pool_api` runs one on an event
loop of its own, for tests whose own code blocks (processes, Envoy)."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.procs import free_port

__all__ = ["FakePoolApi", "threaded_pool_api"]

_PODS = "/api/v1/namespaces/{ns}/pods"
_POOLS = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


def _labels_match(selector: str, labels: dict[str, str]) -> bool:
    pairs = [p.split("=", 1) for p in selector.split(",") if p]
    return all(labels.get(k) == v for k, v in pairs)


class FakePoolApi:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.version = 0
        # (resourceVersion, kind ``pods`` | ``pools``, namespace, event type, object)
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name)
        self.compacted = 0  # events at or below it are gone: a watch from there gets 410
        self.calls: list[tuple[str, dict[str, str]]] = []
        self._tick = asyncio.Event()
        self._ending = 0  # bumped by end_watches: open watches end
        self._runner: web.AppRunner | None = None

    # the test's side

    def kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": "default"}}],
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        return path

    def _change(self, kind: str, ns: str, event: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).update(resourceVersion=str(self.version), namespace=ns)
        key = (kind, ns, obj["metadata"]["name"])
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append((self.version, kind, ns, event, obj))
        self._wake()

    def _wake(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()

    def put_pod(
        self,
        name: str,
        ip: str | None,
        *,
        ready: bool = True,
        labels: dict[str, str] | None = None,
        ns: str = "default",
        deleting: bool = False,
    ) -> None:
        meta: dict[str, Any] = {"name": name, "labels": labels or {"app": "engine"}}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-07T05:00:00Z"
        status: dict[str, Any] = {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}  # fmt: skip
        if ip:
            status["podIP"] = ip
        event = "MODIFIED" if ("pods", ns, name) in self.objects else "ADDED"
        self._change("pods", ns, event, {"kind": "Pod", "apiVersion": "v1",
                                         "metadata": meta, "status": status})  # fmt: skip

    def delete_pod(self, name: str, ns: str = "default") -> None:
        self._change("pods", ns, "DELETED", self.objects[("pods", ns, name)])

    def put_pool(
        self,
        name: str,
        selector: dict[str, str] | None = None,
        ports: tuple[int, ...] = (8000,),
        ns: str = "default",
    ) -> None:
        picker = {"name": "fleetgate-epp", "port": {"number": 9002}}
        spec = {"selector": {"matchLabels": selector or {"app": "engine"}},
                "targetPorts": [{"number": p} for p in ports],
                "endpointPickerRef": picker}  # fmt: skip
        event = "MODIFIED" if ("pools", ns, name) in self.objects else "ADDED"
        obj = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
               "metadata": {"name": name}, "spec": spec}  # fmt: skip
        self._change("pools", ns, event, obj)

    def delete_pool(self, name: str, ns: str = "default") -> None:
        self._change("pools", ns, "DELETED", self.objects[("pools", ns, name)])

    def compact(self) -> None:
        """Other objects of the cluster changed, then the history so far was compacted: a
        watch resumed from any version seen until now is told 410 Gone."""
        self.version += 1
        self.compacted = self.version

    def end_watches(self) -> None:
        """The API server ends every open watch (as its timeout would)."""
        self._ending += 1
        self._wake()

    def lists(self, kind: str = "pods") -> int:
        part = "/pods" if kind == "pods" else "/inferencepools"
        return sum(1 for path, q in self.calls if path.endswith(part) and "watch" not in q)

    # the server's side

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(_PODS, self._pods)
        app.router.add_get(_POOLS, self._pools)
        app.router.add_get(_POOLS + "/{name}", self._get_pool)
        return app

    async def start(self) -> None:
        runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None,
                               shutdown_timeout=1.0)  # fmt: skip
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        self.end_watches()
        if runner is not None:
            await runner.cleanup()

    async def _get_pool(self, request: web.Request) -> web.Response:
        self.calls.append((request.path, dict(request.query)))
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = self.objects.get(("pools", ns, name))
        if obj is None:
            msg = f'inferencepools.inference.networking.k8s.io "{name}" not found'
            return web.json_response(_status(404, "NotFound", msg), status=404)
        return web.json_response(obj)

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        return await self._collection(request, "pods", "PodList")

    async def _pools(self, request: web.Request) -> web.StreamResponse:
        return await self._collection(request, "pools", "InferencePoolList")

    def _matches(self, kind: str, ns: str, obj: dict[str, Any], query: Any) -> bool:
        meta = obj["metadata"]
        if meta.get("namespace") != ns:
            return False
        field = query.get("fieldSelector", "")
        if field.startswith("metadata.name=") and meta["name"] != field.split("=", 1)[1]:
            return False
        return _labels_match(query.get("labelSelector", ""), meta.get("labels") or {})

    async def _collection(self, request: web.Request, kind: str, list_kind: str) -> Any:
        self.calls.append((request.path, dict(request.query)))
        ns, query = request.match_info["ns"], request.query
        if query.get("watch") in ("true", "True", "1"):
            return await self._watch(request, kind, ns)
        items = [o for (k, _, _), o in sorted(self.objects.items())
                 if k == kind and self._matches(kind, ns, o, query)]  # fmt: skip
        return web.json_response({"kind": list_kind, "apiVersion": "v1", "items": items,
                                  "metadata": {"resourceVersion": str(self.version)}})  # fmt: skip

    async def _watch(self, request: web.Request, kind: str, ns: str) -> web.StreamResponse:
        query = request.query
        since = int(query.get("resourceVersion") or self.version)
        timeout = float(query.get("timeoutSeconds") or 60)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if since < self.compacted:
            gone = _status(410, "Expired", f"too old resource version: {since}")
            await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            return resp
        loop = asyncio.get_running_loop()
        deadline, ending = loop.time() + timeout, self._ending
        for _ in range(100_000):  # bounded: far more events than any test makes
            for version, k, _, event, obj in self.history:
                if version > since and k == kind and self._matches(kind, ns, obj, query):
                    line = json.dumps({"type": event, "object": obj}).encode() + b"\n"
                    await resp.write(line)
                since = max(since, version)
            left = deadline - loop.time()
            if left <= 0 or self._ending != ending:
                break
            try:
                await asyncio.wait_for(self._tick.wait(), left)
            except TimeoutError:
                break
        return resp


@contextmanager
def threaded_pool_api() -> Iterator[tuple[FakePoolApi, Callable[..., None]]]:
    """A started `FakePoolApi` on a loop in a thread, and ``edit(method, *args, **kw)``, which
    runs one of its methods (``put_pod`` ...) on that loop and waits for it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-kube-api", daemon=True)
    thread.start()

    def on_loop(make: Callable[[], Any]) -> Any:
        async def run() -> Any:
            got = make()
            return await got if asyncio.iscoroutine(got) else got

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=10)

    api = on_loop(FakePoolApi)
    try:
        on_loop(api.start)

        def edit(method: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
            on_loop(lambda: method(*args, **kwargs))

        yield api, edit
    finally:
        on_loop(api.stop)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
