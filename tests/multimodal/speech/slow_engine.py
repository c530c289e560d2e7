"""An espeak engine that takes its time over phrases containing "slowly" (imported inside the
worker processes of tests/multimodal/speech/test_speech_espeak_worker.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleetgate.multimodal.native.espeak import EspeakEngine


class SlowEngine(EspeakEngine):
    def speak(self, text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
        if "slowly" in text:
            time.sleep(60)
        return super().speak(text, voice, words_per_minute)


STALL_MARK_ENV = "FLEETGATE_TEST_STALL_MARK"


class StallsAfterFirstPhrase(EspeakEngine):
    """Speaks the first phrase, then takes a minute over the next one — once: the worker that
    stalls leaves the file named by ``$FLEETGATE_TEST_STALL_MARK`` with its pid in it (the one
    to kill: with several workers it need not be the first), and a worker started after it
    (the one replacing it once killed) never stalls. Per worker, a phrase the killed
    request had queued could run first on the replacement and the test's next request then
    stalled a minute behind it (60 s of every CI run, a 503 once when the call's own 60 s
    timeout came first)."""

    def __init__(self, library_path: str | None = None, data_path: str | None = None) -> None:
        super().__init__(library_path, data_path)
        self.phrases = 0

    def speak(self, text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
        self.phrases += 1
        mark = Path(os.environ[STALL_MARK_ENV])
        if self.phrases > 1 and not mark.exists():
            mark.write_text(str(os.getpid()))  # the test kills this very worker
            time.sleep(60)
        return super().speak(text, voice, words_per_minute)
