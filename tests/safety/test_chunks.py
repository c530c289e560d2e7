"""The pieces a text is scored on (`classifier.chunks`), and the corpus's sentence pieces."""

from __future__ import annotations

from fleetgate.safety.classifier import BENIGN
from fleetgate.safety.classifier.chunks import split_chunks
from fleetgate_training.classifier import corpus_examples
from fleetgate_training.classifier.corpus import _load, framed_chunks

PAD = ("Some context about the weather and the garden that says nothing at all, " * 3).strip(", ")
PAD += "."  # one sentence of 215 characters


def test_a_short_text_is_one_piece_whatever_its_sentences() -> None:
    """Up to 240 characters a text is read whole: a sentence without a request in it ("What's
    the plan?") is not scored alone."""
    assert split_chunks("How do I kill a stuck process?") == ["How do I kill a stuck process?"]
    text = "I want to bake bread. What's the plan?"
    assert split_chunks(text) == [text]


def test_a_long_text_is_scored_whole_and_by_sentence() -> None:
    text = PAD + " I want to bake bread. What's the plan?"
    assert len(text) > 240
    assert split_chunks(text) == [text, PAD, "I want to bake bread.", "What's the plan?"]
    # Chinese: its English gloss runs about 0.9 tokens a character, so 100 characters is long
    zh = "我们家后院的花开了，天气也不错，" * 6 + "。我想炸薯条。从哪里开始？"
    assert 100 < len(zh) <= 240
    assert split_chunks(zh)[0] == zh and split_chunks(zh)[-2:] == ["我想炸薯条。", "从哪里开始？"]
    assert split_chunks("我想炸薯条。从哪里开始？") == ["我想炸薯条。从哪里开始？"]


def test_a_very_long_text_keeps_its_head_and_tail() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(200))
    pieces = split_chunks(text)
    assert len(pieces) == 48 and text not in pieces
    assert pieces[0] == "Sentence number 0 is here."
    assert pieces[-1] == "Sentence number 199 is here."


def test_framed_pieces_split_into_core_and_frame_words() -> None:
    frame = PAD + " Hi there. I want to {x}. What's the plan?"
    with_core, frame_only = framed_chunks(frame, "fry fish")
    assert with_core == ["I want to fry fish."]
    assert frame_only == [PAD, "Hi there.", "What's the plan?"]
    # a core of two sentences: both pieces hold some of it
    with_core, frame_only = framed_chunks(PAD + " Please {x} Thanks!", "stop. Then go.")
    assert with_core == ["Please stop.", "Then go."] and frame_only == [PAD, "Thanks!"]
    # short, or one sentence: nothing but the whole text, which is not a piece
    assert framed_chunks("Hi. I want to {x}. What's the plan?", "fry fish") == ([], [])
    assert framed_chunks("Teach me how to {x}.", "fry fish") == ([], [])


def test_corpus_pieces_carry_the_cores_label_and_frame_words_are_benign() -> None:
    """A harmful core's sentence in a long frame keeps its category; a frame's own sentence is
    benign, once. (Chinese: the English frames and cores are too short to be split.)"""
    data, other = _load("zh"), _load("en")  # Chinese cores, in Chinese and English frames
    labels = {ex.text: ex.label for ex in corpus_examples("all")}
    prompts = {ex.text for ex in corpus_examples("all", pieces=False)}
    frames = data["frames"] + data["indirect_frames"] + other["frames"]
    found = []
    for core in data["harm"]["weapons"]:
        asked = [f for f in frames if f.replace("{x}", core) in prompts]
        found = [(f, core) for f in asked if framed_chunks(f, core)[0]]
        if found:
            break
    assert found, "some long frame of more than one sentence carries a weapons core"
    pieces = [p for f, core in found for p in framed_chunks(f, core)[0]]
    assert all(labels[p] == "weapons" for p in pieces)
    own = [p for f, core in found for p in framed_chunks(f, core)[1]]
    assert own and all(labels[p] == BENIGN for p in own)
    texts = [ex.text for ex in corpus_examples("all")]
    assert sum(t == own[0] for t in texts) == 1, "a frame's own sentence is one example"
