from __future__ import annotations

from fleetgate.safety.base import Action, CheckContext, PolicyDecision
from fleetgate.safety.checks.pii import PIICheck
from fleetgate.safety.checks.words import WordListCheck
from fleetgate.safety.config import CheckConfig, PolicyConfig, SafetyConfig, StreamConfig
from fleetgate.safety.policy import Guardrails, Policy
from fleetgate.safety.stream import Release, StreamModerator, estimate_tokens

CANNED = "I can't continue with this."
HARMFUL = "mix the pipe bomb powder"


def make_policy(*, hold_back: bool = True, interval: int = 5, pii_mode: str = "mask") -> Policy:
    config = SafetyConfig(
        checks={
            "words": CheckConfig(type="words", options={"include_defaults": False,
                                                         "lists": {"weapons": ["pipe bomb*"]}}),
            "pii": CheckConfig(type="pii", options={"mode": pii_mode}),
        },
        policies={"default": PolicyConfig(
            stream=["words", "pii"], canned_reply=CANNED,
            stream_options=StreamConfig(interval_tokens=interval, window_tokens=50,
                                        hold_back=hold_back, margin_chars=24),
        )},
    )  # fmt: skip
    return Guardrails(config).policy("default")


def words_of(text: str) -> list[str]:
    return [w + " " for w in text.split(" ")]


async def relay(mod: StreamModerator, deltas: list[str]) -> tuple[str, Release | None]:
    """What a client would see, and the stop (if any)."""
    shown = ""
    for d in deltas:
        rel = await mod.push(d)
        shown += rel.text
        if rel.stopped:
            return shown, rel
    rel = await mod.finish()
    shown += rel.text
    return shown, rel if rel.stopped else None


async def test_reply_turning_harmful_is_cut_before_any_harmful_token() -> None:
    benign = "Sure, here is a long and friendly answer about chemistry class safety rules. " * 3
    reply = benign + "Now " + HARMFUL + " into the tube and seal both ends tightly."
    mod = make_policy().stream_moderator(CheckContext())
    shown, stop = await relay(mod, words_of(reply))
    assert stop is not None and stop.stopped
    assert stop.reply == CANNED and stop.finish_reason == "content_filter"
    assert "pipe" not in shown and "bomb" not in shown
    assert shown and benign.startswith(shown)  # the benign part was streamed, not held forever


async def test_harmful_phrase_split_across_deltas_is_never_half_shown() -> None:
    # "pipe" arrives just before a check boundary, "bomb" after it.
    mod = make_policy(interval=3).stream_moderator(CheckContext())
    deltas = ["Step one: ", "get a ", "pipe", " bomb", " casing."]
    shown, stop = await relay(mod, deltas)
    assert stop is not None
    assert "pipe" not in shown


async def test_without_hold_back_text_flows_at_once_and_the_stream_still_stops() -> None:
    mod = make_policy(hold_back=False).stream_moderator(CheckContext())
    deltas = words_of("intro text here " + HARMFUL + " and more and more and more words")
    first = await mod.push(deltas[0])
    assert first.text == deltas[0]  # released before any check
    shown, stop = await relay(mod, deltas[1:])
    assert stop is not None and stop.stopped


async def test_benign_stream_is_released_whole_and_in_order() -> None:
    reply = "Python processes can be stopped with kill or pkill; prefer SIGTERM first. " * 4
    mod = make_policy().stream_moderator(CheckContext())
    shown, stop = await relay(mod, words_of(reply))
    assert stop is None
    assert shown == "".join(words_of(reply))
    assert mod.checks_run >= 2


async def test_violation_in_the_tail_is_caught_by_finish() -> None:
    mod = make_policy(interval=1000).stream_moderator(CheckContext())
    shown, stop = await relay(mod, words_of("short reply: " + HARMFUL))
    assert stop is not None and shown == ""


async def test_pii_in_a_stream_is_masked() -> None:
    mod = make_policy().stream_moderator(CheckContext())
    shown, stop = await relay(mod, words_of("write to li.wei@example.com for details please"))
    assert stop is None
    assert "[EMAIL]" in shown and "li.wei@example.com" not in shown


async def test_pii_block_mode_stops_the_stream() -> None:
    mod = make_policy(pii_mode="block").stream_moderator(CheckContext())
    _, stop = await relay(mod, words_of("my card is 4111 1111 1111 1111 ok"))
    assert stop is not None and stop.verdict is not None
    assert stop.verdict.categories == ("pii_card",)


async def test_after_a_stop_every_push_repeats_the_stop() -> None:
    mod = make_policy(interval=1).stream_moderator(CheckContext())
    _, stop = await relay(mod, [HARMFUL])
    assert stop is not None
    again = await mod.push("more")
    assert again.stopped and again.text == ""


async def test_policy_without_stream_checks_passes_through() -> None:
    config = SafetyConfig(
        checks={"pii": CheckConfig(type="pii")}, policies={"default": PolicyConfig(input=["pii"])}
    )
    mod = Guardrails(config).policy("default").stream_moderator()
    rel = await mod.push(HARMFUL)
    assert rel.text == HARMFUL and mod.checks_run == 0


def test_token_estimate() -> None:
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("你好") == 2


async def test_built_in_checks_are_cheap_enough_for_every_window() -> None:
    # Not a timing assertion: counts checks, so a moderator never re-checks per delta.
    mod = make_policy(interval=50).stream_moderator(CheckContext())
    await relay(mod, ["word "] * 1000)  # ~1250 estimated tokens
    assert 20 <= mod.checks_run <= 30


async def test_word_and_pii_checks_on_one_window() -> None:
    window = "Sure, here is a reply about processes and signals, 中文也有一些内容。" * 12
    words = WordListCheck({"weapons": ["pipe bomb*"]})
    assert not (await words.check(window, CheckContext())).flagged
    assert not (await PIICheck().check(window, CheckContext())).flagged


async def test_checks_start_early_and_widen_to_the_interval() -> None:
    """The first check after ``first_interval_tokens``, then doubling up to the interval: the
    first text of a held-back stream waits 16 tokens, not 50."""
    seen: list[int] = []

    async def run(window: str) -> PolicyDecision:
        seen.append(tokens)
        return PolicyDecision(Action.ALLOW, window)

    mod = StreamModerator(run, StreamConfig(interval_tokens=50, margin_chars=8))
    tokens = 0
    first_text_at = None
    for _ in range(200):
        tokens += 1
        rel = await mod.push("wor ")  # four characters: one token
        if rel.text and first_text_at is None:
            first_text_at = tokens
    assert seen == [16, 48, 98, 148, 198]
    assert first_text_at == 16
    slow = StreamModerator(run, StreamConfig(interval_tokens=50, first_interval_tokens=50))
    seen.clear()
    tokens = 0
    for _ in range(120):
        tokens += 1
        await slow.push("wor ")
    assert seen == [50, 100]


def test_the_safe_cut_finds_the_last_word_boundary() -> None:
    from fleetgate.safety.stream import _safe_cut

    assert _safe_cut("hello wor", 9) == 6
    assert _safe_cut("炸弹abc", 5) == 2
    assert _safe_cut("x" * 1_000_000, 999_000) == 0  # no boundary: hold it all
    assert _safe_cut("ab", 0) == 0
