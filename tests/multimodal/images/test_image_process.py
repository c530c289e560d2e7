import io
import struct
import zlib

import pytest
from PIL import Image

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.process import (
    ImageProcessor,
    ProcessingParams,
    sniff_image_format,
)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG claiming ``width`` x ``height`` with almost no pixel data: a decompression bomb."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def encode(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(("width", "height"), [(100_000, 100_000), (7_000, 7_000)])
def test_decompression_bomb_is_refused_before_decoding(width: int, height: int) -> None:
    with pytest.raises(InvalidRequest) as info:
        ImageProcessor(ProcessingParams(max_decode_pixels=40_000_000)).process(
            png_header_only(width, height), param="image_url"
        )
    assert info.value.status == 400
    assert info.value.code == "image_too_large"
    assert info.value.param == "image_url"


def test_sniffing_ignores_claimed_type() -> None:
    assert sniff_image_format(b"<html>hello</html>") is None
    with pytest.raises(InvalidRequest, match="not a PNG, JPEG, GIF or WEBP"):
        ImageProcessor().process(b"<html>hello</html>")
    rgb = Image.new("RGB", (8, 8))
    assert sniff_image_format(encode(rgb, "PNG")) == "png"
    assert sniff_image_format(encode(rgb, "JPEG")) == "jpeg"
    assert sniff_image_format(encode(rgb, "GIF")) == "gif"
    assert sniff_image_format(encode(rgb, "WEBP")) == "webp"


def test_truncated_image_is_a_clear_400() -> None:
    data = encode(Image.new("RGB", (64, 64), (1, 2, 3)), "PNG")
    with pytest.raises(InvalidRequest, match="could not be"):
        ImageProcessor().process(data[: len(data) // 2])


def test_large_image_is_resized_to_max_pixels_keeping_aspect() -> None:
    data = encode(Image.new("RGB", (1600, 800), (10, 200, 10)), "JPEG")
    out = ImageProcessor(ProcessingParams(max_pixels=200_000)).process(data)
    assert out.width * out.height <= 200_000
    assert abs(out.width / out.height - 2.0) < 0.02
    assert out.mime_type == "image/jpeg"
    assert Image.open(io.BytesIO(out.data)).size == (out.width, out.height)


def test_alpha_images_become_png_and_small_ones_keep_their_size() -> None:
    data = encode(Image.new("RGBA", (30, 20), (0, 0, 0, 0)), "WEBP")
    out = ImageProcessor().process(data)
    assert (out.width, out.height, out.mime_type) == (30, 20, "image/png")
    assert out.data.startswith(b"\x89PNG")
