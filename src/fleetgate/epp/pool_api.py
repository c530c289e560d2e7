"""The Kubernetes API calls the pool watcher makes, through the official ``kubernetes`` client.

Two lists and two watches, none of them on the event loop: a list runs in a worker
thread (``asyncio.to_thread``, bounded by ``request_timeout_s``); a watch runs its blocking
stream (``kubernetes.watch.Watch``) in a thread of its own that hands each event to the loop,
and ends when the API server closes it (``timeoutSeconds``: ``watch_timeout_s``) or when the
``async with`` around it exits (the socket is shut, so the thread does not linger). Objects
are the API's JSON, as dicts. A watch whose ``resourceVersion`` is too old ends with `Gone`
(HTTP 410, or an ``ERROR`` event with code 410): list again. Needs the ``kube`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from fleetgate.epp.pool import GROUP, PLURAL, VERSION
from fleetgate.extras import require

__all__ = ["Gone", "PoolApi", "api_client"]

Event = tuple[str, dict[str, Any]]  # (ADDED | MODIFIED | DELETED, the object)
_KINDS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class Gone(Exception):
    """The watch's ``resourceVersion`` is older than the API server keeps: list again."""


def _k8s() -> Any:
    return require("kubernetes", extra="kube", purpose="watching the InferencePool's pods")


def api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient``: in-cluster (the pod's service account) unless ``kubeconfig`` is
    given, else the kubeconfig (``$KUBECONFIG``, ``~/.kube/config``)."""
    k8s = _k8s()
    if kubeconfig is None:
        config = k8s.client.Configuration()
        try:
            k8s.config.load_incluster_config(client_configuration=config)
            return k8s.client.ApiClient(config)
        except k8s.config.ConfigException:
            pass
    return k8s.config.new_client_from_config(config_file=kubeconfig)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class PoolApi:
    """The InferencePool ``name`` and its pods in ``namespace``."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        name: str,
        *,
        watch_timeout_s: int = 60,
        request_timeout_s: float = 10.0,
    ) -> None:
        k8s = _k8s()
        self.namespace, self.name = namespace, name
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self._core = k8s.client.CoreV1Api(client)
        self._custom = k8s.client.CustomObjectsApi(client)
        self._by_name = f"metadata.name={name}"

    async def read_pool(self) -> tuple[dict[str, Any] | None, str]:
        """The InferencePool object (None: it does not exist) and the resourceVersion to watch
        it from: listed by name, so the version is the list's (current), not the object's
        (which may be older than the history the API server keeps)."""
        resp = await asyncio.to_thread(
            self._custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
            field_selector=self._by_name, _preload_content=False,
            _request_timeout=self.request_timeout_s,
        )  # fmt: skip
        body = json.loads(resp.data)
        items = [i for i in body.get("items") or () if i["metadata"]["name"] == self.name]
        return (items[0] if items else None), str(body["metadata"]["resourceVersion"])

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """The pods matching ``selector`` and the list's ``resourceVersion``."""
        resp = await asyncio.to_thread(
            self._core.list_namespaced_pod, self.namespace, label_selector=selector,
            _preload_content=False, _request_timeout=self.request_timeout_s,
        )  # fmt: skip
        body = json.loads(resp.data)
        return list(body.get("items") or ()), str(body["metadata"]["resourceVersion"])

    def watch_pods(self, selector: str, since: str) -> Watching:
        return Watching(self._core.list_namespaced_pod, self, self.namespace,
                        label_selector=selector, resource_version=since)  # fmt: skip

    def watch_pool(self, since: str) -> Watching:
        return Watching(self._custom.list_namespaced_custom_object, self, GROUP, VERSION,
                        self.namespace, PLURAL, field_selector=self._by_name,
                        resource_version=since)  # fmt: skip


class Watching:
    """One watch request, its blocking stream in a thread: ``async with`` it, then iterate
    its events; the iteration ends with the request (the server's timeout)."""

    def __init__(self, func: Any, api: PoolApi, *args: Any, **kwargs: Any) -> None:
        self._func, self._args = func, args
        timeout = api.watch_timeout_s
        self._kwargs = {**kwargs, "timeout_seconds": timeout,
                        "_request_timeout": (api.request_timeout_s, timeout + 10)}  # fmt: skip
        # return_type "object": events stay the API's JSON (no model built per event)
        self._watch = _k8s().watch.Watch(return_type="object")
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()

        def put(item: tuple[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed first
                loop.call_soon_threadsafe(self._queue.put_nowait, item)

        def run() -> None:
            try:
                for event in self._watch.stream(self._func, *self._args, **self._kwargs):
                    if self._closed:  # left before the request began: end it here
                        break
                    put(("event", event))
            except BaseException as exc:  # handed to the loop, raised there
                put(("error", exc))
            else:
                put(("end", None))

        self._thread = threading.Thread(target=run, name="epp-pool-watch", daemon=True)
        self._thread.start()
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            what, item = await self._queue.get()
            if what == "end":
                return
            if what == "error":
                if _status(item) == 410:
                    raise Gone(str(item)) from item
                raise item
            kind, obj = item.get("type"), item.get("raw_object")
            if kind in _KINDS and isinstance(obj, dict):
                yield kind, obj

    async def __aexit__(self, *exc: object) -> None:
        self._closed = True
        self._watch.stop()  # shuts the socket: the thread's read ends
