"""Speech round trip: espeak-ng (from the espeakng-loader wheel) speaks known sentences and the
pocketsphinx transcription pipeline must give them back."""

import orjson

from fleetgate.multimodal.audio.formats import render_transcript
from fleetgate.multimodal.audio.transcribe import Transcript

# Word error rate allowed over the whole text. Measured here: about 0.10 (pocketsphinx hears
# "call" as "told" and "to" as "that"); the margin absorbs other espeak/pocketsphinx builds.
WER_TOLERANCE = 0.35


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words divided by the reference length."""
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def test_word_error_rate_helper() -> None:
    assert word_error_rate("a b c d", "a b c d") == 0
    assert word_error_rate("a b c d", "a x c") == 0.5
    assert word_error_rate("a b", "") == 1


def test_spoken_sentences_come_back_within_tolerance(
    spoken_transcript: Transcript, sentences: list[str]
) -> None:
    transcript = spoken_transcript
    wer = word_error_rate(" ".join(sentences), transcript.text.lower())
    assert wer <= WER_TOLERANCE, (wer, transcript.text)


def test_silence_separated_utterances_are_separate_segments(
    spoken_transcript: Transcript, sentences: list[str]
) -> None:
    body, content_type = render_transcript(spoken_transcript, "verbose_json")
    assert content_type == "application/json"
    doc = orjson.loads(body)
    segments = doc["segments"]
    assert len(segments) == len(sentences)
    for seg, sentence in zip(segments, sentences, strict=True):
        assert word_error_rate(sentence, seg["text"]) <= 0.5, (sentence, seg["text"])
    starts = [s["start"] for s in segments]
    assert starts == sorted(starts)
    assert all(a["end"] <= b["start"] for a, b in zip(segments, segments[1:], strict=False))
    assert doc["duration"] > segments[-1]["end"] - 0.5
