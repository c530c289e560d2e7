"""A content-addressed cache of processed images with per-tenant guaranteed shares.

Keys are ``sha256(source bytes) + processing parameters``, so the same picture sent twice (by
anyone) is decoded once. Memory is bounded by bytes and evicted least-recently-used, with one
rule on top: an entry is only evicted to make room for *another* tenant when its owner holds more
than its quota. A tenant flooding the cache therefore recycles its own entries beyond its share
and never flushes the others'. An optional disk directory is a second tier.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

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
        registry: Registry | None = None,
    ) -> None:
        if max_bytes <= 0 or tenant_quota_bytes <= 0:
            raise ValueError("cache sizes must be positive")
        self.max_bytes = max_bytes
        self.tenant_quota_bytes = tenant_quota_bytes
        self._disk = Path(disk_dir) if disk_dir is not None else None
        self._max_disk_bytes = max_disk_bytes
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
        """The cached image for ``key`` (memory first, then disk), or None.

        A disk hit is promoted to memory on behalf of ``tenant``.
        """
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._metrics.hits.labels("memory").inc()
            return entry.image
        if self._disk is not None:
            image = await asyncio.to_thread(_read_disk, self._disk, key)
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
            await asyncio.to_thread(_write_disk, self._disk, key, image, self._max_disk_bytes)
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


def _read_disk(root: Path, key: str) -> ProcessedImage | None:
    path = root / key[:2] / key
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    header, _, data = raw.partition(b"\n")
    try:
        meta = json.loads(header)
        image = ProcessedImage(
            data=data,
            mime_type=str(meta["mime_type"]),
            width=int(meta["width"]),
            height=int(meta["height"]),
            source_sha256=str(meta["source_sha256"]),
        )
    except (ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None
    os.utime(path)
    return image


def _write_disk(root: Path, key: str, image: ProcessedImage, max_disk_bytes: int) -> None:
    folder = root / key[:2]
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "mime_type": image.mime_type,
        "width": image.width,
        "height": image.height,
        "source_sha256": image.source_sha256,
    }
    tmp = folder / f".{key}.tmp"
    tmp.write_bytes(json.dumps(meta).encode() + b"\n" + image.data)
    tmp.replace(folder / key)
    _trim_disk(root, max_disk_bytes)


def _trim_disk(root: Path, max_disk_bytes: int) -> None:
    files = [(p.stat(), p) for p in root.glob("??/*") if not p.name.startswith(".")]
    total = sum(st.st_size for st, _ in files)
    for st, path in sorted(files, key=lambda item: item[0].st_mtime):
        if total <= max_disk_bytes:
            break
        path.unlink(missing_ok=True)
        total -= st.st_size
