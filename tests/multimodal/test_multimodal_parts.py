import base64

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.pipeline import LoadedImage
from fleetgate.multimodal.images.process import ProcessedImage
from fleetgate.multimodal.parts import audio_parts, image_parts, replace_parts

MESSAGES = [
    {"role": "system", "content": "sys"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
            {
                "type": "input_audio",
                "input_audio": {"data": base64.b64encode(b"RIFF").decode(), "format": "wav"},
            },
        ],
    },
]


def test_collect_and_replace() -> None:
    images = image_parts(MESSAGES)
    assert [(p.key, p.url, p.detail, p.param) for p in images] == [
        ((1, 1), "https://x/a.png", "low", "messages[1].content[1].image_url")
    ]
    audio = audio_parts(MESSAGES)
    assert [(a.key, a.data, a.format) for a in audio] == [((1, 2), b"RIFF", "wav")]
    loaded = LoadedImage(ProcessedImage(b"PNG", "image/png", 1, 1, "0" * 64), "k", False)
    out = replace_parts(MESSAGES, images={(1, 1): loaded}, transcripts={(1, 2): "hello"})
    assert out[1]["content"][1]["image_url"] == {
        "url": "data:image/png;base64,UE5H",
        "detail": "low",
    }
    assert out[1]["content"][2] == {"type": "text", "text": "hello"}
    assert MESSAGES[1]["content"][2]["type"] == "input_audio"  # input untouched


def test_bad_parts_name_their_param() -> None:
    with pytest.raises(InvalidRequest) as info:
        image_parts([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    assert info.value.param == "messages[0].content[0].image_url"
    bad_audio = [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "%%"}}]}
    ]
    with pytest.raises(InvalidRequest, match="base64"):
        audio_parts(bad_audio)
