import base64
from collections.abc import Callable

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.cache import ProcessedImageCache
from fleetgate.multimodal.images.fetch import FetchPolicy, ImageFetcher
from fleetgate.multimodal.images.pipeline import ImagePipeline
from fleetgate.multimodal.images.process import ImageProcessor, ProcessingParams
from fleetgate.telemetry.registry import Registry


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


async def test_repeated_image_is_a_cache_hit_without_second_decode(
    png_factory: Callable[..., bytes],
) -> None:
    reg = Registry()
    cache = ProcessedImageCache(max_bytes=1 << 20, tenant_quota_bytes=1 << 18, registry=reg)
    async with ImageFetcher(FetchPolicy()) as fetcher:
        pipeline = ImagePipeline(fetcher, ImageProcessor(ProcessingParams()), cache, registry=reg)
        url = data_url(png_factory(300, 200))
        first = await pipeline.load(url, tenant="a")
        second = await pipeline.load(url, tenant="b")
        other = await pipeline.load(data_url(png_factory(300, 200, (0, 0, 255))), tenant="a")
    assert not first.cache_hit and second.cache_hit and not other.cache_hit
    assert second.image == first.image
    assert pipeline.decodes == 2
    text = reg.render().decode()
    assert 'fleetgate_image_cache_hits_total{tier="memory"} 1' in text
    assert "fleetgate_image_decodes_total 2" in text
    assert first.tokens("qwen2-vl") == 11 * 7
    assert first.data_url().startswith("data:image/png;base64,")


async def test_bad_image_surfaces_as_invalid_request_with_param() -> None:
    async with ImageFetcher() as fetcher:
        pipeline = ImagePipeline(fetcher, ImageProcessor())
        with pytest.raises(InvalidRequest) as info:
            await pipeline.load(data_url(b"GIF89a-garbage"), tenant="t", param="p")
    assert info.value.param == "p"
    assert pipeline.decodes == 0
