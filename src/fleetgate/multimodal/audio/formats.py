"""Renderers for ``/v1/audio/transcriptions`` ``response_format``: json, text, verbose_json,
srt and vtt, shaped like OpenAI's responses."""

from __future__ import annotations

from typing import Any, Literal, get_args

import orjson

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.transcribe import Transcript

__all__ = ["ResponseFormat", "render_transcript", "verbose_json"]

ResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt"]
FORMATS: tuple[str, ...] = get_args(ResponseFormat)


def verbose_json(t: Transcript) -> dict[str, Any]:
    """The ``verbose_json`` object: task, language, duration, text and timed segments."""
    return {
        "task": "transcribe",
        "language": t.language,
        "duration": t.duration,
        "text": t.text,
        "segments": [
            {
                "id": s.id,
                "seek": 0,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": [],
                "temperature": 0.0,
            }
            for s in t.segments
        ],
    }


def _timestamp(seconds: float, sep: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{sep}{millis:03d}"


def _srt(t: Transcript) -> str:
    blocks = [
        f"{n}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text}\n"
        for n, s in enumerate(t.segments, start=1)
    ]
    return "\n".join(blocks)


def _vtt(t: Transcript) -> str:
    blocks = [
        f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text}\n" for s in t.segments
    ]
    return "WEBVTT\n\n" + "\n".join(blocks)


def render_transcript(t: Transcript, response_format: str = "json") -> tuple[bytes, str]:
    """The response body and its content type for ``response_format``.

    Example::

        body, content_type = render_transcript(transcript, "srt")
    """
    if response_format == "json":
        return orjson.dumps({"text": t.text}), "application/json"
    if response_format == "verbose_json":
        return orjson.dumps(verbose_json(t)), "application/json"
    if response_format == "text":
        return (t.text + "\n").encode(), "text/plain; charset=utf-8"
    if response_format == "srt":
        return _srt(t).encode(), "application/x-subrip; charset=utf-8"
    if response_format == "vtt":
        return _vtt(t).encode(), "text/vtt; charset=utf-8"
    raise InvalidRequest(
        f"response_format must be one of {', '.join(FORMATS)}", param="response_format"
    )
