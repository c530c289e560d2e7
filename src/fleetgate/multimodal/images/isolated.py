"""Image decoding in worker processes (`fleetgate.multimodal.native`).

Pillow parses bytes a caller chose, with native decoders. In the gateway's process a crash
there would end every tenant's traffic, and each concurrent decode can take width x height x 4
bytes (and as much again to convert). Here at most ``workers`` images decode at once, each in a
supervised process: a crash or hang costs that image's request (503), and decode memory is
bounded by ``workers`` x ``inputs.image_pixels``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fleetgate.multimodal.images.process import ImageProcessor, ProcessedImage, ProcessingParams
from fleetgate.multimodal.native.pool import FailureHook, NativeWorkerPool, WorkerSpec

__all__ = ["ImageWorker", "IsolatedImageProcessor"]


class ImageWorker:
    """The handler inside an image worker: one `ImageProcessor`."""

    def __init__(self, params: dict[str, Any]) -> None:
        self._processor = ImageProcessor(ProcessingParams(**params))

    def process(self, data: bytes, param: str | None) -> dict[str, Any]:
        return dataclasses.asdict(self._processor.process(data, param=param))


class IsolatedImageProcessor:
    """`ImageProcessor` with the decoding in ``workers`` worker processes.

    Example::

        processor = IsolatedImageProcessor(ProcessingParams(max_pixels=512 * 512))
        processed = await processor.process(raw, param="messages[0].content[1]")
        await processor.aclose()
    """

    def __init__(
        self,
        params: ProcessingParams | None = None,
        *,
        workers: int = 2,
        timeout_s: float = 30.0,
        on_failure: FailureHook | None = None,
    ) -> None:
        self.params = params or ProcessingParams()
        spec = WorkerSpec(
            "fleetgate.multimodal.images.isolated:ImageWorker",
            {"params": self.params.model_dump()},
            name="image-decode",
        )
        self.workers = NativeWorkerPool(
            spec, size=workers, call_timeout_s=timeout_s, on_failure=on_failure
        )

    async def process(self, data: bytes, *, param: str | None = None) -> ProcessedImage:
        """Validate, decode, resize and re-encode ``data`` in a worker."""
        out = await self.workers.call("process", data, param)
        return ProcessedImage(
            data=bytes(out["data"]),
            mime_type=str(out["mime_type"]),
            width=int(out["width"]),
            height=int(out["height"]),
            source_sha256=str(out["source_sha256"]),
        )

    async def aclose(self) -> None:
        """Stop the workers."""
        await self.workers.aclose()
