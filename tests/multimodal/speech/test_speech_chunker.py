import random

import pytest

from fleetgate.multimodal.speech.chunker import PhraseChunker

ENGLISH = (
    "Hello there, how are you doing today? I am fine, thanks for asking. The value of pi is "
    "about 3.14 and that is enough for most engineering calculations without punctuation here"
)
CHINESE = "你好，今天天气很好。我们去公园散步吧！你觉得怎么样？我觉得很好：阳光、微风、花香。"


def run(text: str, sizes: list[int], chunker: PhraseChunker | None = None) -> list[str]:
    chunker = chunker or PhraseChunker()
    out: list[str] = []
    pos = 0
    for size in sizes:
        out += chunker.feed(text[pos : pos + size])
        pos += size
    out += chunker.feed(text[pos:])
    return out + chunker.flush()


def test_english_phrases_cut_at_punctuation_without_splitting_words() -> None:
    phrases = run(ENGLISH, [1] * 40 + [7] * 10)
    assert phrases[:4] == [
        "Hello there,",
        "how are you doing today?",
        "I am fine,",
        "thanks for asking.",
    ]
    assert " ".join(phrases).split() == ENGLISH.split()  # nothing lost, no word split
    words = set(ENGLISH.split())
    for phrase in phrases:
        assert set(phrase.split()) <= words, phrase
        assert len(phrase) <= 30, phrase
    assert any("3.14" in p for p in phrases)  # "3." is not a sentence end


def test_result_does_not_depend_on_delta_boundaries() -> None:
    rng = random.Random(7)
    expected = run(ENGLISH, [])
    for _ in range(20):
        sizes = [rng.randint(1, 9) for _ in range(40)]
        assert run(ENGLISH, sizes) == expected


def test_chinese_cut_at_full_width_punctuation() -> None:
    phrases = run(CHINESE, [2] * 30, PhraseChunker(min_chars=4, max_chars=12))
    assert phrases == [
        "你好，今天天气很好。",
        "我们去公园散步吧！",
        "你觉得怎么样？",
        "我觉得很好：",
        "阳光、微风、",
        "花香。",
    ]
    assert "".join(phrases) == CHINESE


def test_chinese_without_punctuation_is_cut_at_max_chars() -> None:
    text = "这是一个没有任何标点符号的非常长的句子我们需要把它切开"
    phrases = run(text, [3] * 10)
    assert "".join(phrases) == text
    assert all(len(p) <= 20 for p in phrases) and len(phrases) >= 2


def test_first_phrase_arrives_before_the_text_ends() -> None:
    chunker = PhraseChunker()
    assert chunker.feed("Sure, here is") == []
    assert chunker.feed(" the plan. Step one") == ["Sure, here is the plan."]
    assert chunker.flush() == ["Step one"]


def test_invalid_sizes() -> None:
    with pytest.raises(ValueError):
        PhraseChunker(min_chars=30, max_chars=20)
