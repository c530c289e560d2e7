"""Image token estimates per model family, so limits, context checks and cost see images.

- ``qwen2-vl``: Qwen2-VL's ``smart_resize`` to multiples of 28 within [min_pixels, max_pixels],
  then one token per 28x28 patch (14-pixel ViT patches merged 2x2).
- ``llava``: a fixed 576 tokens (24x24 patches of a 336-pixel CLIP ViT-L/14).
- ``openai``: GPT-4o tiles: ``low`` detail 85; otherwise fit in 2048x2048, shortest side to
  768, then 85 + 170 per 512-pixel tile.
- ``anthropic``: long edge capped at 1568, then ``ceil(width * height / 750)``.
"""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["ModelFamily", "estimate_image_tokens", "qwen2_vl_resize"]

ModelFamily = Literal["qwen2-vl", "llava", "openai", "anthropic"]

QWEN_FACTOR = 28
QWEN_MIN_PIXELS = 4 * 28 * 28
QWEN_MAX_PIXELS = 16384 * 28 * 28


def qwen2_vl_resize(
    height: int,
    width: int,
    *,
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
    factor: int = QWEN_FACTOR,
) -> tuple[int, int]:
    """Qwen2-VL's ``smart_resize``: the (height, width) the processor feeds the vision tower."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def estimate_image_tokens(
    family: ModelFamily,
    width: int,
    height: int,
    *,
    detail: Literal["auto", "low", "high"] = "auto",
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
) -> int:
    """Tokens one ``width`` x ``height`` image costs on a model of ``family``.

    Example::

        estimate_image_tokens("qwen2-vl", 448, 448)   # 256
        estimate_image_tokens("openai", 1024, 1024)   # 765
    """
    if width <= 0 or height <= 0:
        raise ValueError("image dimensions must be positive")
    if family == "qwen2-vl":
        h, w = qwen2_vl_resize(height, width, min_pixels=min_pixels, max_pixels=max_pixels)
        return (h // QWEN_FACTOR) * (w // QWEN_FACTOR)
    if family == "llava":
        return 576
    if family == "openai":
        return _openai_tokens(width, height, detail)
    if family == "anthropic":
        scale = min(1.0, 1568 / max(width, height))
        return math.ceil((width * scale) * (height * scale) / 750)
    raise ValueError(f"unknown model family {family!r}")


def _openai_tokens(width: int, height: int, detail: str) -> int:
    if detail == "low":
        return 85
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        s = 2048 / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > 768:
        s = 768 / min(w, h)
        w, h = w * s, h * s
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 85 + 170 * tiles
