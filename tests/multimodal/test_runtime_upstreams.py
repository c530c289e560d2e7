"""``backend: openai`` for speech in and out: the runtime builds each upstream client from its
own section (URL, model, key, concurrency, time limit), one section never leaking into the
other's client."""

from __future__ import annotations

from pathlib import Path

from tests.resources.support import resources

from fleetgate.config.settings import Settings
from fleetgate.multimodal.audio.openai_asr import OpenAITranscriber
from fleetgate.multimodal.config import MultimodalConfig
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.speech.openai_tts import OpenAISynthesizer
from fleetgate.resources import Resources

__all__ = ["resources"]


def test_each_openai_backend_gets_its_own_sections_settings(
    tmp_path: Path, resources: Resources
) -> None:
    cfg = MultimodalConfig.model_validate(
        {
            "asr": {
                "backend": "openai",
                "url": "http://whisper:8000/v1/",
                "model": "whisper-large-v3",
                "api_key": "sk-asr",
                "concurrency": 3,
                "timeout_s": 20,
            },
            "tts": {
                "backend": "openai",
                "url": "http://tts:8000/v1",
                "model": "kokoro",
                "concurrency": 5,
                "timeout_s": 7,
            },
        }
    )
    runtime = MultimodalRuntime(
        cfg, Settings(master_key="sk-x", data_dir=tmp_path), resources=resources
    )
    asr = runtime.transcriber.backend
    tts = runtime.synthesizer
    assert isinstance(asr, OpenAITranscriber) and isinstance(tts, OpenAISynthesizer)
    assert asr.url == "http://whisper:8000/v1" + asr.path and asr.model == "whisper-large-v3"
    assert tts.url == "http://tts:8000/v1" + tts.path and tts.model == "kokoro"
    assert asr._headers == {"Authorization": "Bearer sk-asr"} and tts._headers == {}
    assert (asr._limit._value, tts._limit._value) == (3, 5)
    assert (asr._timeout.total, tts._timeout.total) == (20, 7)
