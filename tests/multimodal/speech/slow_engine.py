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


class StallsAfterFirstPhrase(EspeakEngine):
    """Speaks the first phrase, then takes a minute over each of the others."""

    def __init__(self, library_path: str | None = None, data_path: str | None = None) -> None:
        super().__init__(library_path, data_path)
        self.phrases = 0

    def speak(self, text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
        self.phrases += 1
        if self.phrases > 1:
            time.sleep(60)
        return super().speak(text, voice, words_per_minute)
