"""The embedded TTS backend: espeak-ng from the ``espeakng-loader`` wheel, through ctypes.

The wheel ships ``libespeak-ng.so`` and its voice data. The library keeps its state in C
globals and is not safe to initialise from two threads, and a crash in it would end the whole
process. So it never runs in the gateway: each worker process (`fleetgate.multimodal.native`)
loads it once at start, on its main thread, sets up the default voice, and then speaks one
phrase at a time. A dead worker costs the phrase in flight (503); the next phrase gets a new
one. Output is 22050 Hz 16-bit mono PCM.
"""

from __future__ import annotations

import re

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require
from fleetgate.multimodal.native.pool import FailureHook, NativeWorkerPool, WorkerSpec
from fleetgate.multimodal.speech.tts import SynthesizedAudio

__all__ = ["ENGINE", "OPENAI_VOICES", "EspeakSynthesizer"]

ENGINE = "fleetgate.multimodal.native.espeak:EspeakEngine"  # what each worker runs
_VOICE_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,32}(\+[A-Za-z0-9_\-]{1,16})?$")
# OpenAI voice names mapped onto espeak-ng voices and variants ("en" is British English).
OPENAI_VOICES: dict[str, str] = {
    "alloy": "en-us",
    "ash": "en-us+m2",
    "ballad": "en+m4",
    "coral": "en-us+f2",
    "echo": "en-us+m3",
    "fable": "en",
    "nova": "en-us+f3",
    "onyx": "en-us+m7",
    "sage": "en-us+f4",
    "shimmer": "en-us+f5",
    "verse": "en-us+m5",
}


class EspeakSynthesizer:
    """espeak-ng speech at 22050 Hz, synthesised in ``workers`` worker processes.

    OpenAI voice names map to espeak voices (:data:`OPENAI_VOICES`); other names are passed to
    espeak-ng as voice names (``"de"``, ``"en-us+f3"``, ``"cmn"``). Each phrase is one call of
    at most ``timeout_s``.

    Example::

        tts = EspeakSynthesizer()
        audio = await tts.synthesize("Hello there.", voice="alloy")
        await tts.aclose()
    """

    def __init__(
        self,
        *,
        library_path: str | None = None,
        data_path: str | None = None,
        workers: int = 1,
        timeout_s: float = 60.0,
        on_failure: FailureHook | None = None,
    ) -> None:
        if library_path is None or data_path is None:
            # Here, so that a missing extra is a MissingExtra now rather than a failed worker.
            espeakng_loader = require("espeakng_loader", extra="audio", purpose="speech synthesis")
            library_path = library_path or str(espeakng_loader.get_library_path())
            data_path = data_path or str(espeakng_loader.get_data_path())
        paths = {"library_path": library_path, "data_path": data_path}
        spec = WorkerSpec(ENGINE, paths, name="espeak")
        self.workers = NativeWorkerPool(
            spec, size=workers, call_timeout_s=timeout_s, on_failure=on_failure
        )

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
        wpm = int(min(450, max(80, 175 * speed)))
        pcm, rate = await self.workers.call("speak", text, name, wpm)
        return SynthesizedAudio(bytes(pcm), int(rate))

    async def aclose(self) -> None:
        """Stop the worker processes."""
        await self.workers.aclose()
