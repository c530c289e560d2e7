"""Voice-activity segmentation with WebRTC VAD.

Frames of 30 ms are classified speech/non-speech; speech frames separated by less than
``min_silence_s`` are merged, segments shorter than ``min_speech_s`` dropped, long ones split at
``max_segment_s``, and each segment padded by ``pad_s`` (recognisers want a little silence).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from fleetgate.extras import require
from fleetgate.multimodal.audio.decode import TARGET_RATE

__all__ = ["SpeechSegment", "VadConfig", "segment_speech", "to_pcm16"]

FRAME_MS = 30


class VadConfig(BaseModel):
    """Segmentation settings."""

    aggressiveness: int = Field(default=2, ge=0, le=3)
    min_silence_s: float = Field(default=0.4, ge=0)
    min_speech_s: float = Field(default=0.15, ge=0)
    max_segment_s: float = Field(default=30.0, gt=0)
    pad_s: float = Field(default=0.3, ge=0)


@dataclass(frozen=True, slots=True)
class SpeechSegment:
    """A stretch of speech: times in seconds and its 16 kHz float32 samples."""

    start: float
    end: float
    samples: npt.NDArray[np.float32]


def to_pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    """Little-endian 16-bit PCM of float samples in [-1, 1]."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _speech_runs(samples: npt.NDArray[np.float32], cfg: VadConfig) -> list[tuple[int, int]]:
    webrtcvad = require("webrtcvad", extra="audio", purpose="voice activity detection")
    vad = webrtcvad.Vad(cfg.aggressiveness)
    frame = TARGET_RATE * FRAME_MS // 1000
    pcm = to_pcm16(samples)
    runs: list[tuple[int, int]] = []
    start: int | None = None
    n_frames = len(samples) // frame
    for i in range(n_frames):
        chunk = pcm[i * frame * 2 : (i + 1) * frame * 2]
        if vad.is_speech(chunk, TARGET_RATE):
            if start is None:
                start = i
        elif start is not None:
            runs.append((start * frame, i * frame))
            start = None
    if start is not None:
        runs.append((start * frame, n_frames * frame))
    return runs


def _merge(runs: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for begin, end in runs:
        if merged and begin - merged[-1][1] < gap:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((begin, end))
    return merged


def segment_speech(
    samples: npt.NDArray[np.float32], config: VadConfig | None = None
) -> list[SpeechSegment]:
    """Split 16 kHz mono ``samples`` into speech segments, in time order."""
    cfg = config or VadConfig()
    rate = TARGET_RATE
    runs = _merge(_speech_runs(samples, cfg), int(cfg.min_silence_s * rate))
    runs = [(b, e) for b, e in runs if e - b >= cfg.min_speech_s * rate]
    longest = int(cfg.max_segment_s * rate)
    pieces = [(s, min(s + longest, e)) for b, e in runs for s in range(b, e, longest)]
    pad = int(cfg.pad_s * rate)
    out: list[SpeechSegment] = []
    for begin, end in pieces:
        lo, hi = max(0, begin - pad), min(len(samples), end + pad)
        out.append(SpeechSegment(lo / rate, hi / rate, samples[lo:hi]))
    return out
