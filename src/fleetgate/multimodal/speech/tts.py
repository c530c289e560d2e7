"""The text-to-speech interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from fleetgate.multimodal.fair import FairShare

__all__ = ["FairSynthesizer", "SpeechSynthesizer", "SynthesizedAudio"]


@dataclass(frozen=True, slots=True)
class SynthesizedAudio:
    """Mono 16-bit little-endian PCM and its sample rate."""

    pcm: bytes
    sample_rate: int

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.pcm) / 2 / self.sample_rate

    def samples(self) -> npt.NDArray[np.float32]:
        """The audio as float32 in [-1, 1]."""
        return np.frombuffer(self.pcm, dtype="<i2").astype(np.float32) / 32768.0


@runtime_checkable
class SpeechSynthesizer(Protocol):
    """Turns text into speech. Implementations must not block the event loop."""

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio: ...

    async def aclose(self) -> None: ...


class FairSynthesizer:
    """``inner`` for one caller: each phrase is synthesised in ``owner``'s turn of ``share``
    (`fleetgate.multimodal.fair.FairShare`). One per request; :meth:`aclose` leaves ``inner``
    open (it is shared)."""

    def __init__(self, inner: SpeechSynthesizer, share: FairShare, owner: str) -> None:
        self._inner = inner
        self._share = share
        self._owner = owner

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio:
        async with self._share.turn(self._owner):
            return await self._inner.synthesize(text, voice=voice, speed=speed)

    async def aclose(self) -> None:
        """Nothing of its own to close."""
