from fleetgate.sim.tokenizer import Tokenizer, split_pieces


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
