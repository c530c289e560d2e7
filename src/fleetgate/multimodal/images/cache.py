"""A content-addressed cache of processed images with per-tenant guaranteed shares.

Keys are ``sha256(source bytes) + processing parameters``, so the same picture sent twice (by
anyone) is decoded once. Memory is bounded by bytes and evicted least-recently-used, with one
rule on top: an entry is only evicted to make room for *another* tenant when its owner holds more
than its quota. A tenant flooding the cache therefore recycles its own entries beyond its share
and never flushes the others'. An optional disk directory is a second tier, per tenant and with
a share of its own (`fleetgate.multimodal.images.disk_cache.DiskTier`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass

from fleetgate.multimodal.images.disk_cache import DiskTier
from fleetgate.multimodal.images.process import ProcessedImage, ProcessingParams
from fleetgate.telemetry.registry import Registry

__all__ = ["ProcessedImageCache", "image_cache_key"]


def image_cache_key(source: bytes, params: ProcessingParams) -> str:
    """The content address of ``source`` processed with ``params``."""
    digest = hashlib.sha256(source).hexdigest()
    return hashlib.sha256(f"{digest}|{params.cache_tag()}".encode()).hexdigest()


@dataclass(slots=True)
class _Entry:
    image: ProcessedImage
    tenant: str


class _Metrics:
    def __init__(self, registry: Registry | None) -> None:
        reg = registry or Registry()
        self.hits = reg.counter(
            "fleetgate_image_cache_hits_total", "Processed-image cache hits.", ["tier"]
        )
        self.misses = reg.counter("fleetgate_image_cache_misses_total", "Image cache misses.")
        self.evictions = reg.counter(
            "fleetgate_image_cache_evictions_total", "Image cache evictions.", ["tier"]
        )
        self.bytes = reg.gauge("fleetgate_image_cache_bytes", "Bytes held in the memory tier.")


class ProcessedImageCache:
    """Memory (LRU, byte cap) plus optional disk cache of :class:`ProcessedImage`.

    Example::

        cache = ProcessedImageCache(max_bytes=256 << 20, tenant_quota_bytes=16 << 20,
                                    registry=registry)
        hit = await cache.get(key)
        if hit is None:
            await cache.put(key, processed, tenant="team-a")
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        tenant_quota_bytes: int,
        disk_dir: str | os.PathLike[str] | None = None,
        max_disk_bytes: int = 1 << 30,
        tenant_disk_quota_bytes: int = 128 << 20,
        registry: Registry | None = None,
    ) -> None:
        if max_bytes <= 0 or tenant_quota_bytes <= 0:
            raise ValueError("cache sizes must be positive")
        self.max_bytes = max_bytes
        self.tenant_quota_bytes = tenant_quota_bytes
        self._disk = (
            DiskTier(disk_dir, max_bytes=max_disk_bytes, tenant_quota_bytes=tenant_disk_quota_bytes)
            if disk_dir is not None
            else None
        )
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._tenant_bytes: dict[str, int] = {}
        self._bytes = 0
        self._metrics = _Metrics(registry)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return self._bytes

    def tenant_bytes(self, tenant: str) -> int:
        """Bytes in memory owned by ``tenant``."""
        return self._tenant_bytes.get(tenant, 0)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    async def get(self, key: str, *, tenant: str = "") -> ProcessedImage | None:
        """The cached image for ``key`` (memory first, then ``tenant``'s disk files), or None.

        A disk hit is promoted to memory on behalf of ``tenant``.
        """
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._metrics.hits.labels("memory").inc()
            return entry.image
        if self._disk is not None:
            image = await asyncio.to_thread(self._disk.read, key, tenant)
            if image is not None:
                self._metrics.hits.labels("disk").inc()
                self._insert(key, image, tenant=tenant)
                return image
        self._metrics.misses.inc()
        return None

    async def put(self, key: str, image: ProcessedImage, *, tenant: str) -> bool:
        """Store ``image``; returns False when it could not be kept in memory within the quotas."""
        kept = self._insert(key, image, tenant=tenant)
        if self._disk is not None:
            await asyncio.to_thread(self._disk.write, key, image, tenant)
        return kept

    def _insert(self, key: str, image: ProcessedImage, *, tenant: str) -> bool:
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        size = image.nbytes
        if size > self.max_bytes:
            return False
        while self._bytes + size > self.max_bytes:
            victim = self._pick_victim(tenant)
            if victim is None:
                return False
            self._remove(victim)
            self._metrics.evictions.labels("memory").inc()
        self._entries[key] = _Entry(image, tenant)
        self._bytes += size
        self._tenant_bytes[tenant] = self._tenant_bytes.get(tenant, 0) + size
        self._metrics.bytes.set(self._bytes)
        return True

    def _pick_victim(self, tenant: str) -> str | None:
        # Oldest entry whose owner is over quota; the inserting tenant may always recycle its own.
        for key, entry in self._entries.items():
            owner_bytes = self._tenant_bytes.get(entry.tenant, 0)
            if entry.tenant == tenant or owner_bytes > self.tenant_quota_bytes:
                return key
        return None

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key)
        size = entry.image.nbytes
        self._bytes -= size
        left = self._tenant_bytes[entry.tenant] - size
        if left:
            self._tenant_bytes[entry.tenant] = left
        else:
            del self._tenant_bytes[entry.tenant]
        self._metrics.bytes.set(self._bytes)
