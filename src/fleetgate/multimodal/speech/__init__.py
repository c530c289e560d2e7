"""Speech out: TTS backends, audio encoders, the phrase chunker and the in-order streamer."""

from fleetgate.multimodal.speech.chunker import PhraseChunker
from fleetgate.multimodal.speech.encode import AudioFormat, AudioStreamEncoder, encode_audio
from fleetgate.multimodal.speech.espeak import EspeakSynthesizer
from fleetgate.multimodal.speech.openai_tts import OpenAISynthesizer
from fleetgate.multimodal.speech.streamer import AudioDelta, SpeechStreamer
from fleetgate.multimodal.speech.tts import SpeechSynthesizer, SynthesizedAudio

__all__ = [
    "AudioDelta",
    "AudioFormat",
    "EspeakSynthesizer",
    "OpenAISynthesizer",
    "PhraseChunker",
    "SpeechStreamer",
    "SpeechSynthesizer",
    "AudioStreamEncoder",
    "SynthesizedAudio",
    "encode_audio",
]
