"""espeak-ng inside a worker process (see `fleetgate.multimodal.speech.espeak`).

Here, not in ``speech/``, so that a worker imports only this module, ctypes and the error
tree: it starts in tens of milliseconds.
"""

from __future__ import annotations

import ctypes
from typing import Any

from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.extras import require

__all__ = ["EspeakEngine"]

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1
_DEFAULT_VOICE = "en-us"

_Callback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakEngine:
    """espeak-ng inside a worker process: loaded and initialised once, then one call at a time.

    Not for the gateway's own process: `fleetgate.multimodal.speech.espeak.EspeakSynthesizer`
    starts it in workers.
    """

    def __init__(self, library_path: str | None = None, data_path: str | None = None) -> None:
        if library_path is None or data_path is None:
            espeakng_loader = require("espeakng_loader", extra="audio", purpose="speech synthesis")
            library_path = library_path or str(espeakng_loader.get_library_path())
            data_path = data_path or str(espeakng_loader.get_data_path())
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
        self._chunks: list[bytes] = []
        self._callback = _Callback(self._collect)  # kept alive: C holds the pointer
        lib.espeak_SetSynthCallback(self._callback)
        if lib.espeak_SetVoiceByName(_DEFAULT_VOICE.encode()) != 0:
            raise ServiceUnavailable(f"espeak-ng has no {_DEFAULT_VOICE!r} voice in {data_path}")

    def info(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate}

    def _collect(self, wav: Any, count: int, _events: Any) -> int:
        if wav and count > 0:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    def speak(self, text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
        """16-bit PCM of ``text`` and its sample rate."""
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
        return pcm, self.sample_rate
