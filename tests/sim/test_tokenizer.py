import re

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.sim.tokenizer import Tokenizer, split_pieces


def _rules(text: str) -> list[str]:
    """The documented rules, word by word (the slow reference the one-regex split must match)."""
    out: list[str] = []
    for piece in re.findall(r"\s*(?:\w+|[^\w\s])|\s+", text):
        word = piece.lstrip()
        lead = piece[: len(piece) - len(word)]
        out.append(lead + word[:4])
        out.extend(word[i : i + 4] for i in range(4, len(word), 4))
    return [p for p in out if p]


@given(st.text(alphabet=st.sampled_from("ab1_ \n\t,.!é中　"), max_size=60))
def test_the_one_regex_split_follows_the_documented_rules(text: str) -> None:
    assert split_pieces(text) == _rules(text)


def test_pieces_round_trip_and_split_long_words() -> None:
    text = "Hello, tokenizer world!\n  ok "
    pieces = split_pieces(text)
    assert "".join(pieces) == text
    assert pieces[:4] == ["Hell", "o", ",", " toke"]
    assert pieces[4:6] == ["nize", "r"]


def test_ids_are_stable_and_equal_text_gives_equal_ids() -> None:
    a, b = Tokenizer(), Tokenizer()
    assert a.encode("the same words") == b.encode("the same words")
    assert a.encode("cat") != a.encode("dog")
    assert len(a.encode("one two four")) == 3


def test_chat_template_counts_roles_and_images() -> None:
    tok = Tokenizer(image_tokens=100)
    plain = tok.encode_chat([{"role": "user", "content": "hi"}])
    # "<|user|>\n": < | user | > \n (6), "hi", "\n", "<|assistant|>\n": 8 (assi stan t)
    assert len(plain.ids) == 6 + 1 + 1 + 8
    with_image = tok.encode_chat(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "http://x/a.png"}},
                ],
            }
        ]
    )
    assert with_image.image_tokens == 100
    assert len(with_image.ids) == len(plain.ids) + 100
