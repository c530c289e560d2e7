"""An InferencePool and its pods as the picker reads them: which pods are endpoints, where.

Pure functions of the Kubernetes objects (the API's JSON, as dicts), no I/O: `pool_spec` reads
an ``inference.networking.k8s.io/v1`` InferencePool (``spec.selector.matchLabels``,
``spec.targetPorts[].number``); `endpoints_of` turns the pool's pods into its endpoints, as
the Endpoint Picker Protocol addresses them (``podIP:port``): a pod counts while it matches the
selector, has a ``podIP``, has no ``deletionTimestamp`` (terminating) and its ``Ready``
condition is ``True``. Each target port of a pod is one endpoint (the pool's ports are its
data-parallel ranks): named by the pod with one port, ``<pod>-rank-<i>`` with several.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Endpoint", "PoolSpec", "endpoints_of", "label_selector", "pod_ready", "pool_spec"]

GROUP = "inference.networking.k8s.io"
VERSION = "v1"
PLURAL = "inferencepools"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What the picker reads of an InferencePool: the pods' labels and the ports to dial."""

    selector: tuple[tuple[str, str], ...]  # matchLabels, sorted
    ports: tuple[int, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.selector)


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    """One engine the picker may pick: ``ip:port`` of a ready pod of the pool."""

    name: str
    ip: str
    port: int

    @property
    def host(self) -> str:
        """The IP as a URL's host (an IPv6 one in brackets)."""
        return f"[{self.ip}]" if ":" in self.ip else self.ip

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def pool_spec(pool: Mapping[str, Any]) -> PoolSpec:
    """The selector and ports of an InferencePool object; `ValueError` when it has none (the
    CRD's schema requires both: an object without is not one the picker can serve)."""
    spec = pool.get("spec") or {}
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    ports = tuple(int(p["number"]) for p in spec.get("targetPorts") or () if "number" in p)
    if not labels or not ports:
        raise ValueError("the InferencePool needs spec.selector.matchLabels and targetPorts")
    return PoolSpec(tuple(sorted((str(k), str(v)) for k, v in labels.items())), ports)


def label_selector(spec: PoolSpec) -> str:
    """The selector as the API's ``labelSelector`` query (``a=b,c=d``)."""
    return ",".join(f"{k}={v}" for k, v in spec.selector)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Ready, addressed and not terminating."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def endpoints_of(pods: Iterable[Mapping[str, Any]], spec: PoolSpec) -> tuple[Endpoint, ...]:
    """The pool's endpoints among ``pods``, sorted by name (one per pod and target port)."""
    out: list[Endpoint] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not spec.matches(meta.get("labels") or {}) or not pod_ready(pod):
            continue
        name, ip = str(meta.get("name", "")), str(pod["status"]["podIP"])
        if len(spec.ports) == 1:
            out.append(Endpoint(name, ip, spec.ports[0]))
        else:
            out.extend(Endpoint(f"{name}-rank-{i}", ip, p) for i, p in enumerate(spec.ports))
    return tuple(sorted(out))
