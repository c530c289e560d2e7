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


def test_corrupted_answers_a_set_share_of_prompts_wrongly_and_always_the_same() -> None:
    from fleetgate.sim.generation import corrupted

    prompts = [f"question number {i} please" for i in range(2000)]
    wrong = [p for p in prompts if corrupted(p, 0.1) != p]
    assert 150 <= len(wrong) <= 250  # about 10%
    assert wrong == [p for p in prompts if corrupted(p, 0.1) != p]  # deterministic
    # a smaller fraction corrupts a subset of a larger one's prompts
    assert set(p for p in prompts if corrupted(p, 0.05) != p) <= set(wrong)
    assert all(corrupted(p, 0.0) == p for p in prompts[:50])
    answer = corrupted(prompts[0], 1.0)
    assert answer != prompts[0] and all(w.lower() in WORDS for w in answer.split())
