"""Find and replace the multimodal parts of OpenAI chat messages.

The wiring in the request path is: collect the parts, process them (images through
``ImagePipeline``, audio through ``Transcriber``), then rebuild the messages::

    images = image_parts(body["messages"])
    budget.check_request(len(images))
    loaded = {p.key: await pipeline.load(p.url, tenant=team, param=p.param) for p in images}
    audio = audio_parts(body["messages"])
    texts = {p.key: (await transcriber.transcribe(p.data)).text for p in audio}
    body["messages"] = replace_parts(body["messages"], images=loaded, transcripts=texts)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.pipeline import LoadedImage

__all__ = ["AudioPart", "ImagePart", "audio_parts", "image_parts", "replace_parts"]

PartKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ImagePart:
    key: PartKey
    url: str
    detail: str
    param: str


@dataclass(frozen=True, slots=True)
class AudioPart:
    key: PartKey
    data: bytes
    format: str
    param: str


def _parts(messages: Sequence[Mapping[str, Any]], kind: str) -> list[tuple[PartKey, Any, str]]:
    """Each content part of type ``kind``, in order: its key, its ``kind`` value (the part's
    spec) and its ``param`` path for error messages."""
    found: list[tuple[PartKey, Any, str]] = []
    for mi, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for pi, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == kind:
                found.append(((mi, pi), part.get(kind), f"messages[{mi}].content[{pi}].{kind}"))
    return found


def image_parts(messages: Sequence[Mapping[str, Any]]) -> list[ImagePart]:
    """Every ``image_url`` part, in order, with the ``param`` path for error messages."""
    out: list[ImagePart] = []
    for key, spec, param in _parts(messages, "image_url"):
        url = spec.get("url") if isinstance(spec, dict) else spec
        if not isinstance(url, str) or not url:
            raise InvalidRequest("image_url must have a 'url' string", param=param)
        detail = spec.get("detail", "auto") if isinstance(spec, dict) else "auto"
        out.append(ImagePart(key, url, str(detail), param))
    return out


def audio_parts(messages: Sequence[Mapping[str, Any]]) -> list[AudioPart]:
    """Every ``input_audio`` part, base64-decoded."""
    out: list[AudioPart] = []
    for key, spec, param in _parts(messages, "input_audio"):
        if not isinstance(spec, dict) or not isinstance(spec.get("data"), str):
            raise InvalidRequest("input_audio must have base64 'data'", param=param)
        try:
            data = base64.b64decode(spec["data"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequest("input_audio data is not valid base64", param=param) from exc
        out.append(AudioPart(key, data, str(spec.get("format", "wav")), param))
    return out


def replace_parts(
    messages: Sequence[Mapping[str, Any]],
    *,
    images: Mapping[PartKey, LoadedImage] | None = None,
    transcripts: Mapping[PartKey, str] | None = None,
) -> list[dict[str, Any]]:
    """A copy of ``messages`` with images swapped for their processed ``data:`` URLs and audio
    parts swapped for text parts holding their transcripts."""
    images = images or {}
    transcripts = transcripts or {}
    out: list[dict[str, Any]] = []
    for mi, message in enumerate(messages):
        new = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            parts: list[Any] = []
            for pi, part in enumerate(content):
                key = (mi, pi)
                if key in images:
                    spec = dict(part.get("image_url") or {})
                    spec["url"] = images[key].data_url()
                    parts.append({**part, "image_url": spec})
                elif key in transcripts:
                    parts.append({"type": "text", "text": transcripts[key]})
                else:
                    parts.append(part)
            new["content"] = parts
        out.append(new)
    return out
