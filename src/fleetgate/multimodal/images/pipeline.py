"""``image_url`` -> processed image: fetch, look up the cache, decode off the event loop, store.

Concurrent requests for the same image share one decode (single flight). With a ``share``
(`fleetgate.multimodal.fair.FairShare`), decodes take turns at the decoding workers round-robin
between tenants, so one tenant's backlog of images never holds up another's.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal

from fleetgate.multimodal.fair import FairShare
from fleetgate.multimodal.images.cache import ProcessedImageCache, image_cache_key
from fleetgate.multimodal.images.fetch import ImageFetcher
from fleetgate.multimodal.images.isolated import IsolatedImageProcessor
from fleetgate.multimodal.images.process import ImageProcessor, ProcessedImage
from fleetgate.multimodal.images.tokens import ModelFamily, estimate_image_tokens
from fleetgate.telemetry.registry import Registry

__all__ = ["ImagePipeline", "LoadedImage"]

Detail = Literal["auto", "low", "high"]


@dataclass(frozen=True, slots=True)
class LoadedImage:
    """A processed image plus its content address (for routing affinity) and cache outcome."""

    image: ProcessedImage
    cache_key: str
    cache_hit: bool

    def tokens(self, family: ModelFamily, *, detail: Detail = "auto") -> int:
        """Estimated image tokens of the processed image on a model of ``family``."""
        return estimate_image_tokens(family, self.image.width, self.image.height, detail=detail)

    def data_url(self) -> str:
        """The processed image as a base64 ``data:`` URL for the upstream request."""
        import base64

        return f"data:{self.image.mime_type};base64,{base64.b64encode(self.image.data).decode()}"


class ImagePipeline:
    """Loads images for requests.

    An `IsolatedImageProcessor` decodes in its own worker processes (what the gateway uses);
    a plain :class:`ImageProcessor` runs on ``executor`` (None: the loop's default thread
    pool).

    Example::

        async with ImageFetcher(policy) as fetcher:
            pipeline = ImagePipeline(fetcher, ImageProcessor(params), cache, registry=reg)
            loaded = await pipeline.load(url, tenant="team-a", param="messages[0].content[1]")
    """

    def __init__(
        self,
        fetcher: ImageFetcher,
        processor: ImageProcessor | IsolatedImageProcessor,
        cache: ProcessedImageCache | None = None,
        *,
        executor: Executor | None = None,
        registry: Registry | None = None,
        share: FairShare | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._share = share
        self._processor = processor
        self._cache = cache
        self._executor = executor
        self._inflight: dict[str, asyncio.Future[ProcessedImage]] = {}
        reg = registry or Registry()
        self._decodes = reg.counter("fleetgate_image_decodes_total", "Images decoded.")
        self._decode_seconds = reg.histogram(
            "fleetgate_image_decode_seconds", "Time to decode and re-encode one image."
        )

    @property
    def decodes(self) -> int:
        """How many images this pipeline has decoded (cache misses that reached Pillow)."""
        return int(self._decodes.labels().value)

    async def load(self, url: str, *, tenant: str, param: str | None = None) -> LoadedImage:
        """Fetch and normalise one image; raises ``InvalidRequest`` for refused or bad images."""
        source = await self._fetcher.fetch(url, param=param)
        key = image_cache_key(source, self._processor.params)
        if self._cache is not None:
            cached = await self._cache.get(key, tenant=tenant)
            if cached is not None:
                return LoadedImage(cached, key, True)
        pending = self._inflight.get(key)
        if pending is not None:
            return LoadedImage(await asyncio.shield(pending), key, True)
        future: asyncio.Future[ProcessedImage] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            if self._share is None:
                image = await self._decode(source, param)
            else:
                async with self._share.turn(tenant):
                    image = await self._decode(source, param)
            if self._cache is not None:
                await self._cache.put(key, image, tenant=tenant)
            future.set_result(image)
            return LoadedImage(image, key, False)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]

    async def _decode(self, source: bytes, param: str | None) -> ProcessedImage:
        loop = asyncio.get_running_loop()
        start = loop.time()
        if isinstance(self._processor, IsolatedImageProcessor):
            image = await self._processor.process(source, param=param)
        else:
            call = functools.partial(self._processor.process, source, param=param)
            image = await loop.run_in_executor(self._executor, call)
        self._decodes.inc()
        self._decode_seconds.observe(loop.time() - start)
        return image
