"""Image decoding takes turns between tenants: one tenant's backlog of images never holds up
another tenant's image (`ImagePipeline` with a `FairShare`, as the gateway builds it)."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fleetgate.multimodal.fair import FairShare
from fleetgate.multimodal.images.fetch import ImageFetcher
from fleetgate.multimodal.images.pipeline import ImagePipeline
from fleetgate.multimodal.images.process import ImageProcessor, ProcessedImage


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


class HeldProcessor(ImageProcessor):
    """Decodes each image only once the test releases it (images are told apart by colour)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[int] = []
        self.release: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def process(self, data: bytes, *, param: str | None = None) -> ProcessedImage:
        image = super().process(data, param=param)
        colour = image.data.__hash__()
        with self._lock:
            self.started.append(colour)
            event = self.release.setdefault(colour, threading.Event())
        event.wait(10)
        return image


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


async def test_a_tenant_s_image_backlog_does_not_hold_up_another_tenant(
    png_factory: Callable[..., bytes],
) -> None:
    one_worker = ThreadPoolExecutor(1)  # the decoding workers: one, first come first served
    processor = HeldProcessor()
    images = {name: png_factory(32, 32, (i * 40, 0, 0)) for i, name in enumerate("abcd")}
    colours = {name: ImageProcessor().process(png).data.__hash__() for name, png in images.items()}
    share = FairShare("image decoding", capacity=1)
    async with ImageFetcher() as fetcher:
        pipeline = ImagePipeline(fetcher, processor, executor=one_worker, share=share)
        loads = []
        for n, name in enumerate("abc", start=1):  # tenant t1 sends three images
            loads.append(asyncio.create_task(pipeline.load(data_url(images[name]), tenant="t1")))
            await until(lambda n=n: len(processor.started) + share.waiting("t1") == n)
        other = asyncio.create_task(pipeline.load(data_url(images["d"]), tenant="t2"))
        await until(lambda: share.waiting("t2") == 1)
        for done, name in enumerate("ab", start=1):  # a's decode ends, then the next one's
            await until(lambda done=done: len(processor.started) == done)
            processor.release[colours[name]].set()
        await until(lambda: len(processor.started) == 3)
        order = list(processor.started)
        for event in [processor.release.setdefault(c, threading.Event()) for c in colours.values()]:
            event.set()
        await asyncio.gather(*loads, other)
    one_worker.shutdown()
    # t2's image waited for one more of t1's, not for all of t1's backlog.
    assert order[:3] == [colours["a"], colours["b"], colours["d"]]
