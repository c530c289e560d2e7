"""An espeak engine that takes its time over phrases containing "slowly" (imported inside the
worker processes of tests/multimodal/speech/test_speech_espeak_worker.py)."""

from __future__ import annotations

import time

from fleetgate.multimodal.native.espeak import EspeakEngine


class SlowEngine(EspeakEngine):
    def speak(self, text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
        if "slowly" in text:
            time.sleep(60)
        return super().speak(text, voice, words_per_minute)
