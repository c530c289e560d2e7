import random

from fleetgate.sim.generation import WORDS, plan_output
from fleetgate.sim.tokenizer import split_pieces


def _plan(mode: str, max_tokens: int | None, ignore_eos: bool = False, seed: int = 1):
    return plan_output(
        mode=mode,
        echo_text="one two four",
        max_tokens=max_tokens,
        default_len=7,
        ignore_eos=ignore_eos,
        rng=random.Random(seed),
    )


def test_random_mode_length_and_seed() -> None:
    pieces, reason = _plan("random", None)
    assert len(pieces) == 7 and reason == "stop"
    pieces, reason = _plan("random", 5)
    assert len(pieces) == 5 and reason == "length"
    assert _plan("random", 5)[0] == pieces and _plan("random", 5, seed=2)[0] != pieces
    # Every random word is exactly one token of the simulator's tokenizer.
    assert all(len(w) <= 4 for w in WORDS)
    assert len(split_pieces("".join(pieces))) == 5


def test_echo_mode_truncates_and_ignore_eos_repeats() -> None:
    assert _plan("echo", None) == (["one", " two", " four"], "stop")
    assert _plan("echo", 2) == (["one", " two"], "length")
    pieces, reason = _plan("echo", 5, ignore_eos=True)
    assert "".join(pieces) == "one two fourone two" and reason == "length"
