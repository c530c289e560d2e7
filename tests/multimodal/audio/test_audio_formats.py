import orjson
import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.formats import render_transcript
from fleetgate.multimodal.audio.transcribe import Transcript, TranscriptSegment

T = Transcript(
    text="hello there general kenobi",
    duration=3725.5,
    language="en",
    segments=(
        TranscriptSegment(0, 0.0, 1.25, "hello there"),
        TranscriptSegment(1, 3723.5, 3725.004, "general kenobi"),
    ),
)


def test_json_and_text() -> None:
    body, ctype = render_transcript(T, "json")
    assert orjson.loads(body) == {"text": "hello there general kenobi"}
    assert ctype == "application/json"
    body, ctype = render_transcript(T, "text")
    assert body == b"hello there general kenobi\n" and ctype.startswith("text/plain")


def test_srt_and_vtt_timestamps() -> None:
    srt = render_transcript(T, "srt")[0].decode()
    assert srt == (
        "1\n00:00:00,000 --> 00:00:01,250\nhello there\n\n"
        "2\n01:02:03,500 --> 01:02:05,004\ngeneral kenobi\n"
    )
    vtt = render_transcript(T, "vtt")[0].decode()
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.250\nhello there\n")
    assert "01:02:03.500 --> 01:02:05.004\ngeneral kenobi" in vtt


def test_verbose_json_shape() -> None:
    doc = orjson.loads(render_transcript(T, "verbose_json")[0])
    assert doc["task"] == "transcribe" and doc["duration"] == 3725.5
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in doc["segments"]] == [
        (0, 0.0, 1.25, "hello there"),
        (1, 3723.5, 3725.004, "general kenobi"),
    ]


def test_unknown_format_is_400() -> None:
    with pytest.raises(InvalidRequest) as info:
        render_transcript(T, "docx")
    assert info.value.param == "response_format"
