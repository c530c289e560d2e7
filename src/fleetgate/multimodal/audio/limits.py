"""`AudioLimits` and the checks that apply them to what a file declares and what it decodes to.

The same checks run twice: on the header read in the gateway (`fleetgate.multimodal.audio.probe`)
before any decoder or worker sees the bytes, and in the worker while the samples are decoded
(`fleetgate.multimodal.audio.decode`), which catches a header that understates the length.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from fleetgate.errors import InvalidRequest

__all__ = ["AudioLimits", "check_length", "check_stream"]


class AudioLimits(BaseModel, frozen=True):
    """Bounds on one audio input (see `fleetgate.multimodal.budgets.InputBudget`)."""

    max_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    max_seconds: float = Field(default=600.0, gt=0)
    max_samples: int = Field(default=57_600_000, gt=0)  # frames x channels
    max_rate: int = Field(default=192_000, gt=0)
    max_channels: int = Field(default=8, gt=0)

    def check_size(self, size: int, param: str | None) -> None:
        """Refuse a file of ``size`` bytes past ``max_bytes`` (before it is parsed at all)."""
        if size > self.max_bytes:
            raise InvalidRequest(
                f"audio is larger than {self.max_bytes} bytes", param=param, code="audio_too_large"
            )


def check_stream(
    rate: int, channels: int, frames: int | None, limits: AudioLimits, param: str | None
) -> None:
    """Refuse a sample rate, channel count or length (``frames``, when known) past ``limits``."""
    if not 0 < rate <= limits.max_rate:
        raise InvalidRequest(
            f"audio sample rate {rate} Hz is outside 1-{limits.max_rate} Hz", param=param
        )
    if not 0 < channels <= limits.max_channels:
        raise InvalidRequest(
            f"audio has {channels} channels, outside 1-{limits.max_channels}", param=param
        )
    if frames is not None:
        check_length(frames, rate, channels, limits, param)


def check_length(
    frames: int, rate: int, channels: int, limits: AudioLimits, param: str | None
) -> None:
    """Refuse ``frames`` frames of ``channels`` at ``rate`` past the length limits."""
    if frames > limits.max_seconds * rate:
        raise InvalidRequest(f"audio is longer than {limits.max_seconds:g} seconds", param=param)
    if frames * channels > limits.max_samples:
        raise InvalidRequest(
            f"audio decodes to more than {limits.max_samples} samples "
            f"({frames} frames x {channels} channels)",
            param=param,
            code="audio_too_large",
        )
