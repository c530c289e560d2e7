"""`InputBudget`: the one place that bounds what a caller may upload.

Every upload path takes its limits from here (``multimodal.inputs`` in the config):

============================  =========================================================
``upload_bytes``              a whole multipart upload, counted after Content-Encoding
                              (gzip, deflate, br) is undone, while it is read (a
                              larger ``audio_bytes`` is capped by it)
``upload_parts``              multipart parts in one upload
``field_bytes``               each multipart field other than the file
``audio_bytes``               one audio file as sent (an upload or an ``input_audio``)
``audio_seconds``             its length, from the header, then counted while decoding
``audio_samples``             decoded frames x channels, same
``audio_rate`` / ``_channels``  sample rate and channels from the header
``image_pixels``              width x height from the image header, before decoding
``document_chars``            one retrieval document
``team_document_bytes``       all of a team's retrieval documents (UTF-8 bytes)
``team_documents``            how many documents a team may keep
============================  =========================================================

JSON bodies are bounded by ``server.max_request_bytes``; fetched images by
``images.fetch.max_bytes``. The older ``asr.max_bytes``, ``asr.max_seconds`` and
``images.max_decode_pixels`` still work: set alone, they fill the matching field here.

Example (YAML)::

    multimodal:
      inputs: {upload_bytes: 33554432, audio_samples: 28800000, team_document_bytes: 8388608}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from fleetgate.multimodal.audio.limits import AudioLimits

__all__ = ["InputBudget"]

_MIB = 1024 * 1024


class InputBudget(BaseModel):
    """Limits on every input; each is enforced while reading or decoding, before the large
    allocation it guards, with a 400 or 413 in OpenAI's error format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # a whole multipart upload, counted after `Content-Encoding` is undone (413)
    upload_bytes: int = Field(32 * _MIB, gt=0)
    # parts in one upload (400 `too_many_parts`)
    upload_parts: int = Field(16, gt=0)
    # each upload field other than the file (413)
    field_bytes: int = Field(64 * 1024, gt=0)
    # one audio file, uploaded or `input_audio`
    audio_bytes: int = Field(25 * _MIB, gt=0)
    # longest audio
    audio_seconds: float = Field(600.0, gt=0)
    audio_samples: int = Field(57_600_000, gt=0)  # 600 s of 48 kHz stereo
    # highest sample rate (Hz)
    audio_rate: int = Field(192_000, gt=0)
    # most channels
    audio_channels: int = Field(8, gt=0)
    # larger images are refused before decoding (400 `image_too_large`)
    image_pixels: int = Field(40_000_000, gt=0)
    # longest retrieval document
    document_chars: int = Field(2_000_000, gt=0)
    # a team's retrieval documents in all (413 `team_documents_full`)
    team_document_bytes: int = Field(16 * _MIB, gt=0)
    # a team's retrieval documents at most (413 `team_documents_full`)
    team_documents: int = Field(10_000, gt=0)

    def audio_limits(self) -> AudioLimits:
        """The bounds `fleetgate.multimodal.audio.decode.decode_audio` applies."""
        from fleetgate.multimodal.audio.limits import AudioLimits

        return AudioLimits(
            max_bytes=self.audio_bytes,
            max_seconds=self.audio_seconds,
            max_samples=self.audio_samples,
            max_rate=self.audio_rate,
            max_channels=self.audio_channels,
        )
