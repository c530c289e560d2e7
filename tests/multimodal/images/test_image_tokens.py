import pytest

from fleetgate.multimodal.images.tokens import estimate_image_tokens, qwen2_vl_resize


def test_qwen2_vl_patches() -> None:
    assert estimate_image_tokens("qwen2-vl", 448, 448) == 256
    assert qwen2_vl_resize(500, 700) == (504, 700)
    assert estimate_image_tokens("qwen2-vl", 700, 500) == 18 * 25
    # Tiny images are scaled up to min_pixels (4 patches).
    assert estimate_image_tokens("qwen2-vl", 10, 10) == 4
    # Huge images are capped by max_pixels.
    assert estimate_image_tokens("qwen2-vl", 4000, 4000, max_pixels=1024 * 28 * 28) <= 1024


def test_openai_tiles_match_the_published_examples() -> None:
    assert estimate_image_tokens("openai", 1024, 1024) == 765
    assert estimate_image_tokens("openai", 2048, 4096) == 1105
    assert estimate_image_tokens("openai", 4096, 8192, detail="low") == 85


def test_llava_and_anthropic() -> None:
    assert estimate_image_tokens("llava", 10, 4000) == 576
    assert estimate_image_tokens("anthropic", 1000, 1000) == 1334
    assert estimate_image_tokens("anthropic", 3136, 3136) == estimate_image_tokens(
        "anthropic", 1568, 1568
    )


def test_bad_dimensions() -> None:
    with pytest.raises(ValueError):
        estimate_image_tokens("qwen2-vl", 0, 10)
