"""The embedded TTS backend: espeak-ng from the ``espeakng-loader`` wheel, through ctypes.

The wheel ships ``libespeak-ng.so`` and its voice data. The library keeps its state in C
globals, so one process has one engine: it is loaded once (``functools.cache``) and every call
holds its lock. Synthesis runs on a worker thread and returns 22050 Hz 16-bit mono PCM.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import re
import threading
from typing import Any

from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.extras import require
from fleetgate.multimodal.speech.tts import SynthesizedAudio

__all__ = ["OPENAI_VOICES", "EspeakSynthesizer"]

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1
_VOICE_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,32}(\+[A-Za-z0-9_\-]{1,16})?$")

# OpenAI voice names mapped onto espeak-ng voices and variants.
OPENAI_VOICES: dict[str, str] = {
    "alloy": "en-us",
    "ash": "en-us+m2",
    "ballad": "en-gb+m4",
    "coral": "en-us+f2",
    "echo": "en-us+m3",
    "fable": "en-gb",
    "nova": "en-us+f3",
    "onyx": "en-us+m7",
    "sage": "en-us+f4",
    "shimmer": "en-us+f5",
    "verse": "en-us+m5",
}

_Callback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class _Engine:
    """One process's espeak-ng: the loaded library, its sample rate and a lock."""

    def __init__(self, library_path: str, data_path: str) -> None:
        lib = ctypes.CDLL(library_path)
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetSynthCallback.argtypes = [_Callback]
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), 0)
        if rate <= 0:
            raise ServiceUnavailable(f"espeak-ng failed to initialise (data at {data_path})")
        self.lib: Any = lib
        self.sample_rate = int(rate)
        self.lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._callback = _Callback(self._collect)  # kept alive: C holds the pointer
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: Any, count: int, _events: Any) -> int:
        if wav and count > 0:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    def speak(self, text: str, voice: str, words_per_minute: int) -> bytes:
        with self.lock:
            if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise InvalidRequest(f"voice {voice!r} is not available", param="voice")
            self.lib.espeak_SetParameter(_PARAM_RATE, words_per_minute, 0)
            self._chunks = []
            data = text.encode("utf-8")
            err = self.lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8,
                                        None, None)  # fmt: skip
            if err != 0:
                raise ServiceUnavailable(f"espeak-ng synthesis failed (error {err})")
            self.lib.espeak_Synchronize()
            pcm, self._chunks = b"".join(self._chunks), []
            return pcm


@functools.cache
def _engine(library_path: str, data_path: str) -> _Engine:
    return _Engine(library_path, data_path)


class EspeakSynthesizer:
    """espeak-ng speech at 22050 Hz.

    OpenAI voice names map to espeak voices (:data:`OPENAI_VOICES`); other names are passed to
    espeak-ng as voice names (``"de"``, ``"en-gb+f3"``, ``"cmn"``).

    Example::

        tts = EspeakSynthesizer()
        audio = await tts.synthesize("Hello there.", voice="alloy")
    """

    def __init__(self, *, library_path: str | None = None, data_path: str | None = None) -> None:
        espeakng_loader = require("espeakng_loader", extra="audio", purpose="speech synthesis")
        self._library_path = library_path or str(espeakng_loader.get_library_path())
        self._data_path = data_path or str(espeakng_loader.get_data_path())

    def _synthesize_blocking(self, text: str, voice: str, speed: float) -> SynthesizedAudio:
        engine = _engine(self._library_path, self._data_path)
        wpm = int(min(450, max(80, 175 * speed)))
        return SynthesizedAudio(engine.speak(text, voice, wpm), engine.sample_rate)

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio:
        """Speak ``text``; ``speed`` in OpenAI's 0.25-4.0 range scales the speaking rate."""
        if not 0.25 <= speed <= 4.0:
            raise InvalidRequest("speed must be between 0.25 and 4.0", param="speed")
        name = OPENAI_VOICES.get(voice.lower(), voice)
        if not _VOICE_NAME.match(name):
            raise InvalidRequest(f"voice {voice!r} is not a valid voice name", param="voice")
        if not text.strip():
            return SynthesizedAudio(b"", 22050)
        return await asyncio.to_thread(self._synthesize_blocking, text, name, speed)

    async def aclose(self) -> None:
        """Nothing to release: the engine lives as long as the process."""
