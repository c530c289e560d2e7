"""The disk tier of the processed-image cache, with a guaranteed share per tenant.

Files live under ``root/<tenant digest>/<key[:2]>/<key>``: each tenant reads only its own, so
a tenant can neither see which images another has sent nor push them out. The directory holds
at most ``max_bytes``; when a write takes it past that, files are deleted oldest first (by
last use), taking only files of the writing tenant or of a tenant holding more than
``tenant_quota_bytes``: a tenant flooding the disk recycles its own files and never the share
of the others. A write that no such deletion makes room for is dropped.

Blocking file work: the memory tier runs these functions in a thread.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from fleetgate.multimodal.images.process import ProcessedImage

__all__ = ["DiskTier"]


@dataclass(frozen=True, slots=True)
class _File:
    path: Path
    tenant: str
    size: int
    used: float


def _tenant_dir(tenant: str) -> str:
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class DiskTier:
    """Processed images on disk, per tenant (see the module docstring).

    Example::

        disk = DiskTier("/var/cache/fleetgate/images", max_bytes=1 << 30,
                        tenant_quota_bytes=128 << 20)
        disk.write(key, image, tenant="team-a")
        image = disk.read(key, tenant="team-a")
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int, tenant_quota_bytes: int):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.tenant_quota_bytes = tenant_quota_bytes

    def _path(self, key: str, tenant: str) -> Path:
        return self.root / _tenant_dir(tenant) / key[:2] / key

    def read(self, key: str, tenant: str) -> ProcessedImage | None:
        """``tenant``'s stored image for ``key``, or None."""
        path = self._path(key, tenant)
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
        os.utime(path)  # last use, for the trim order
        return image

    def write(self, key: str, image: ProcessedImage, tenant: str) -> bool:
        """Store ``image`` for ``tenant``; False when it could not be kept within the shares."""
        path = self._path(key, tenant)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "mime_type": image.mime_type,
            "width": image.width,
            "height": image.height,
            "source_sha256": image.source_sha256,
        }
        tmp = path.parent / f".{key}.tmp"
        tmp.write_bytes(json.dumps(meta).encode() + b"\n" + image.data)
        tmp.replace(path)
        return self._trim(_tenant_dir(tenant), path)

    def _files(self) -> list[_File]:
        files = []
        for path in self.root.glob("*/??/*"):
            if path.name.startswith("."):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:  # deleted by another process meanwhile
                continue
            files.append(_File(path, path.parent.parent.name, st.st_size, st.st_mtime))
        return files

    def _trim(self, writer: str, written: Path) -> bool:
        files = sorted(self._files(), key=lambda f: f.used)
        total = sum(f.size for f in files)
        held: dict[str, int] = {}
        for f in files:
            held[f.tenant] = held.get(f.tenant, 0) + f.size
        for f in files:
            if total <= self.max_bytes:
                break
            if f.path == written:
                continue
            if f.tenant == writer or held[f.tenant] > self.tenant_quota_bytes:
                f.path.unlink(missing_ok=True)
                total -= f.size
                held[f.tenant] -= f.size
        if total <= self.max_bytes:
            return True
        written.unlink(missing_ok=True)  # no room within the shares: not kept
        return False
