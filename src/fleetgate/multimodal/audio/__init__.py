"""Speech in: judge the header, decode, resample to 16 kHz, segment by voice activity,
transcribe, render."""

from fleetgate.multimodal.audio.asr import PocketsphinxTranscriber, SegmentTranscriber
from fleetgate.multimodal.audio.decode import AudioLimits, decode_audio
from fleetgate.multimodal.audio.formats import ResponseFormat, render_transcript
from fleetgate.multimodal.audio.openai_asr import OpenAITranscriber
from fleetgate.multimodal.audio.prepare import AudioPreparer, IsolatedAudioDecoder, PreparedAudio
from fleetgate.multimodal.audio.probe import DeclaredAudio, judge_audio
from fleetgate.multimodal.audio.transcribe import Transcriber, Transcript, TranscriptSegment
from fleetgate.multimodal.audio.vad import SpeechSegment, VadConfig, segment_speech

__all__ = [
    "AudioLimits",
    "AudioPreparer",
    "DeclaredAudio",
    "IsolatedAudioDecoder",
    "OpenAITranscriber",
    "PocketsphinxTranscriber",
    "PreparedAudio",
    "ResponseFormat",
    "SegmentTranscriber",
    "SpeechSegment",
    "Transcriber",
    "Transcript",
    "TranscriptSegment",
    "VadConfig",
    "decode_audio",
    "judge_audio",
    "render_transcript",
    "segment_speech",
]
