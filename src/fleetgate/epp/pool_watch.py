"""`PoolWatch`: the InferencePool's ready pods, followed through the Kubernetes API.

As the reference endpoint picker does (``--pool-name``, ``--pool-namespace``): read the pool,
list the pods its selector matches, then watch both from the resourceVersions the reads
returned. Each change of the endpoint set (`fleetgate.epp.pool.endpoints_of`: a pod added,
ready, unready, deleted or given another IP; the pool's ports changed) is handed to
``on_change`` at once; the first one marks the watch ``synced`` (the picker's readiness).

- a watch the server ends (its ``timeoutSeconds``) is resumed from the last resourceVersion;
- a watch that is told ``410 Gone`` (its resourceVersion compacted away) lists again;
- the pool's selector changed: the pods are listed again with the new one;
- the pool deleted: no endpoints and not synced, until it exists again;
- any other failure (the API server unreachable, 5xx, a refused token): the last endpoint set
  stays in use and the session starts again after a backoff (``backoff_s`` doubled per failure
  in a row up to ``backoff_max_s``, jittered); the request path never waits on any of it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from fleetgate.epp.pool import Endpoint, PoolSpec, endpoints_of, label_selector, pool_spec
from fleetgate.epp.pool_api import Gone, PoolApi
from fleetgate.tasks import Background, RunsInBackground, cancel_and_wait, cancelling

__all__ = ["PoolWatch"]

log = logging.getLogger("fleetgate.epp")

# (source ``pod`` / ``pool``, event type, the object; or the watch's error, type ``ERROR``)
_Item = tuple[str, str, "dict[str, Any] | Exception"]
_MIN_WATCH_S = 1.0  # a watch that ended sooner with no event: wait this long before the next


class _Relist(Exception):
    """End the session without a backoff: list again (410, a new selector, pool deleted)."""


class PoolWatch(RunsInBackground):
    """Follows one InferencePool's pods; ``endpoints`` is the last set known."""

    def __init__(
        self,
        api: PoolApi,
        on_change: Callable[[tuple[Endpoint, ...]], None],
        *,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.api = api
        self.on_change = on_change
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.endpoints: tuple[Endpoint, ...] = ()
        self.synced = False
        self.spec: PoolSpec | None = None
        self.lists = 0  # pod lists made: the first, then each after a 410 or a new selector
        self.failures = 0  # failed sessions in a row
        self._pods: dict[str, dict[str, Any]] = {}
        self._rng = rng or random.Random()
        self._task = Background(self._run, name="epp-pool-watch")

    def is_synced(self) -> bool:
        """The first list is applied and the pool exists (the picker's readiness)."""
        return self.synced

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:  # until aclose; each failure waits a capped backoff
            began = loop.time()
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if cancelling():
                    raise asyncio.CancelledError from exc
                if isinstance(exc, _Relist):
                    log.info("pool %s: listing again (%s)", self.api.name, exc)
                    if loop.time() - began >= _MIN_WATCH_S:
                        continue  # at once; one again right after a list backs off
                self.failures += 1
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** min(self.failures - 1, 16))
                delay *= 0.5 + self._rng.random()
                log.warning("pool %s/%s: %s; keeping %d endpoints, retrying in %.1f s",
                            self.api.namespace, self.api.name, _why(exc), len(self.endpoints),
                            delay)  # fmt: skip
                await asyncio.sleep(delay)

    async def _session(self) -> None:
        """Read the pool, list its pods, then follow both until a list is due again."""
        pool, pool_since = await self.api.read_pool()
        if pool is None:
            self._lost()
            raise LookupError(f"InferencePool {self.api.namespace}/{self.api.name} not found")
        spec = pool_spec(pool)
        items, since = await self.api.list_pods(label_selector(spec))
        self.lists += 1
        self.spec = spec
        self._pods = {_name(p): p for p in items}
        self.failures = 0
        self._publish()
        events: asyncio.Queue[_Item] = asyncio.Queue()
        pods = asyncio.create_task(self._follow("pod", label_selector(spec), since, events))
        pools = asyncio.create_task(self._follow("pool", "", pool_since, events))
        try:
            while True:  # until an event asks for a list or a watch fails
                source, kind, obj = await events.get()
                if isinstance(obj, Exception):
                    _failed(source, obj)
                elif source == "pod":
                    self._pod(kind, obj)
                else:
                    self._pool(kind, obj)
        finally:
            await cancel_and_wait(pods, pools)

    async def _follow(
        self,
        source: str,
        selector: str,
        since: str,
        out: asyncio.Queue[_Item],
    ) -> None:
        """Watch from ``since``, resumed from the last version seen each time the server
        ends the request; a failure is put on ``out`` for the session to raise."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                began, seen = loop.time(), False
                watching = (
                    self.api.watch_pods(selector, since)
                    if source == "pod"
                    else self.api.watch_pool(since)
                )
                async with watching as stream:
                    async for kind, obj in stream:
                        seen = True
                        since = _version(obj) or since
                        out.put_nowait((source, kind, obj))
                if not seen and loop.time() - began < _MIN_WATCH_S:
                    await asyncio.sleep(_MIN_WATCH_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            out.put_nowait((source, "ERROR", exc))

    def _pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._pods.pop(_name(obj), None)
        else:
            self._pods[_name(obj)] = obj
        self._publish()

    def _pool(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._lost()
            raise _Relist("the InferencePool was deleted")
        spec = pool_spec(obj)
        if self.spec is not None and spec.selector != self.spec.selector:
            raise _Relist("the InferencePool's selector changed")
        self.spec = spec
        self._publish()

    def _publish(self) -> None:
        if self.spec is None:
            return
        endpoints = endpoints_of(self._pods.values(), self.spec)
        if self.synced and endpoints == self.endpoints:
            return
        if not self._hand_over(endpoints):
            return  # tried again at the next event or list
        first = not self.synced
        self.endpoints, self.synced = endpoints, True
        log.info("pool %s: %d endpoints%s", self.api.name, len(endpoints),
                 " (synced)" if first else "")  # fmt: skip

    def _hand_over(self, endpoints: tuple[Endpoint, ...]) -> bool:
        try:
            self.on_change(endpoints)
        except Exception:
            log.exception("pool %s: the endpoints could not be applied", self.api.name)
            return False
        return True

    def _lost(self) -> None:
        """The pool is gone: nothing to pick from, and not ready until it is back."""
        self.spec, self._pods = None, {}
        if (self.synced or self.endpoints) and self._hand_over(()):
            self.endpoints, self.synced = (), False


def _failed(source: str, exc: Exception) -> None:
    """A watch failed: a 410 lists again at once, anything else backs off."""
    if isinstance(exc, Gone):
        raise _Relist(f"the {source} watch's resourceVersion is gone") from exc
    raise exc


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _why(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if isinstance(status, int) and status:
        return f"the API answered {status} {reason or ''}".rstrip()
    return f"{type(exc).__name__}: {exc}"
