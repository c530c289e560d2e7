from __future__ import annotations

import pytest

from fleetgate.safety.normalize import Normalizer


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("ＫＩＬＬ", "kill"),  # full width
        ("KiLl", "kill"),  # case
        ("k i l l", "kill"),  # spaced letters
        ("k.i.l.l", "kill"),
        ("k-i_l*l", "kill"),
        ("кіll", "kill"),  # Cyrillic к, і
        ("рοіѕоn", "poison"),  # Cyrillic/Greek look-alikes
        ("p0150n", "poison"),  # leet digits
        ("b@$h", "bash"),
        ("炸 弹", "炸弹"),  # CJK spacing
        ("炸*弹", "炸弹"),
    ],
)
def test_evasions_fold_to_the_plain_word(raw: str, want: str) -> None:
    assert Normalizer().normalize(raw) == want


def test_real_word_boundaries_survive() -> None:
    n = Normalizer()
    assert n.normalize("use your skill to kill time") == "use your skill to kill time"
    assert n.normalize("I have 2 apples") == "i have 2 apples"
