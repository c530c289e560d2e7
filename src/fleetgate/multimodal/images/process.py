"""Decode, bound, resize and re-encode images.

The format is sniffed from magic bytes (PNG, JPEG, GIF, WEBP), never taken from a Content-Type.
The pixel count is read from the header and checked *before* any pixel data is decoded, so a
decompression bomb costs a header parse, not gigabytes of memory.
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass
from typing import Literal

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, Field

from fleetgate.errors import InvalidRequest

__all__ = ["ImageProcessor", "ProcessedImage", "ProcessingParams", "sniff_image_format"]

ImageFormat = Literal["png", "jpeg", "gif", "webp"]


def sniff_image_format(data: bytes) -> ImageFormat | None:
    """The image format from the leading magic bytes, or None when it is not one we accept."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


class ProcessingParams(BaseModel, frozen=True):
    """How an image is normalised; part of the cache key, so changing it never serves stale data."""

    max_pixels: int = Field(default=1024 * 1024, gt=0)
    max_decode_pixels: int = Field(default=40_000_000, gt=0)
    output_format: Literal["auto", "png", "jpeg"] = "auto"
    jpeg_quality: int = Field(default=90, ge=1, le=100)

    def cache_tag(self) -> str:
        """A stable string of the parameters for cache keys."""
        return (
            f"mp={self.max_pixels};dp={self.max_decode_pixels};"
            f"f={self.output_format};q={self.jpeg_quality}"
        )


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """A normalised image ready for the engine."""

    data: bytes
    mime_type: str
    width: int
    height: int
    source_sha256: str

    @property
    def nbytes(self) -> int:
        return len(self.data)


class ImageProcessor:
    """Decodes and normalises images (CPU work: call from a worker thread or process).

    Example::

        processed = ImageProcessor(ProcessingParams(max_pixels=512 * 512)).process(raw)
    """

    def __init__(self, params: ProcessingParams | None = None) -> None:
        self.params = params or ProcessingParams()

    def process(self, data: bytes, *, param: str | None = None) -> ProcessedImage:
        """Validate, decode, resize and re-encode ``data``; raise :class:`InvalidRequest` if bad."""
        fmt = sniff_image_format(data)
        if fmt is None:
            raise InvalidRequest(
                "image is not a PNG, JPEG, GIF or WEBP file", param=param, code="invalid_image"
            )
        image = self._open_bounded(data, param)
        try:
            image.seek(0)
            image.load()
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise InvalidRequest(
                f"image could not be decoded: {exc}", param=param, code="invalid_image"
            ) from exc
        has_alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
        image = image.convert("RGBA" if has_alpha else "RGB")
        image = _shrink(image, self.params.max_pixels)
        out_format = self._output_format(fmt, has_alpha)
        buf = io.BytesIO()
        if out_format == "jpeg":
            image.save(buf, format="JPEG", quality=self.params.jpeg_quality)
        else:
            image.save(buf, format="PNG", optimize=False)
        return ProcessedImage(
            data=buf.getvalue(),
            mime_type=f"image/{out_format}",
            width=image.width,
            height=image.height,
            source_sha256=hashlib.sha256(data).hexdigest(),
        )

    def _open_bounded(self, data: bytes, param: str | None) -> Image.Image:
        try:
            image = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise InvalidRequest(
                f"image is too large to decode ({exc})", param=param, code="image_too_large"
            ) from exc
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise InvalidRequest(
                f"image could not be read: {exc}", param=param, code="invalid_image"
            ) from exc
        width, height = image.size
        if width <= 0 or height <= 0:
            raise InvalidRequest("image has no pixels", param=param, code="invalid_image")
        if width * height > self.params.max_decode_pixels:
            raise InvalidRequest(
                f"image is {width}x{height} pixels, over the decode limit of "
                f"{self.params.max_decode_pixels} pixels (decompression bomb?)",
                param=param,
                code="image_too_large",
            )
        if int(getattr(image, "n_frames", 1) or 1) > 1000:
            # Only the first frame is decoded, but thousands of frames signal a hostile file.
            raise InvalidRequest("animated image has too many frames", param=param)
        return image

    def _output_format(self, source: ImageFormat, has_alpha: bool) -> Literal["png", "jpeg"]:
        if self.params.output_format != "auto":
            return self.params.output_format
        return "jpeg" if source == "jpeg" and not has_alpha else "png"


def _shrink(image: Image.Image, max_pixels: int) -> Image.Image:
    pixels = image.width * image.height
    if pixels <= max_pixels:
        return image
    scale = math.sqrt(max_pixels / pixels)
    size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)
