"""Every regular expression in the package runs in time linear in its input.

Python's ``re`` backtracks: a pattern that retries every start position of a long run and
rescans the run each time (``[a-z]+@`` over ``aaaa...``) takes quadratic time, and a request of a
few hundred kilobytes then holds the event loop for minutes. This test finds every regex of the
package in its source (each ``re.<function>(pattern, ...)`` call: a literal pattern, or one built
from module constants, evaluated in its module), plus those built from data (the shipped word
lists), and runs each over adversarial texts of 10k and 100k characters: runs of one character
or a pair of characters from the alphabets the patterns use, alone and with a character that
ends a match attempt. Ten times the input must take about ten times as long, not a hundred.

Patterns an operator writes in the configuration (``re:`` word-list entries, semantic routing
patterns, release-evaluation expectations) are the operator's; the shipped ones are tested here.
"""

from __future__ import annotations

import ast
import gc
import importlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import fleetgate
from fleetgate.safety.checks.words import (
    WordListCheck,
    default_reply_word_lists,
    default_word_lists,
)

SOURCE = Path(fleetgate.__file__).parent
FUNCTIONS = set("compile search match fullmatch findall finditer split sub subn".split())

# Call sites whose pattern is neither a literal nor built from module constants: (file, the
# pattern argument's source) -> where the patterns they build are tested instead (or why not).
BUILT_ELSEWHERE = {
    ("safety/checks/words.py", "entry[3:]"): "shipped word lists, below",
    ("safety/checks/words.py", "f'(?<![{_WORD}])(?:{alternation})'"): "shipped word lists, below",
    ("routing/semantic_config.py", "p"): "the operator's routing patterns",
    ("routing/semantic.py", "p"): "the operator's routing patterns",
    ("releases/schema.py", "schema['pattern']"): "an evaluation suite's JSON schema",
    ("releases/scorers.py", "str(item.expected)"): "an evaluation suite's expected pattern",
    ("releases/suites.py", "str(self.expected)"): "an evaluation suite's expected pattern",
    # re.escape'd literals joined by "|": linear by construction
    ("releases/judge.py", "'|'.join((re.escape(k) for k in values))"): "escaped literals",
}

SIZES = (10_000, 100_000)
QUICK_S = 0.005  # a 10k run faster than this is linear (a quadratic one costs 50 ms or more)
GIVE_UP_S = 0.05  # a 10k run slower than this is not linear (a linear one costs about 1 ms)
MAX_RATIO = 40.0  # 10x the input: ~10x the time if linear, ~100x if quadratic

_SINGLES = [*"aA1f \n\t.@-_=:+/$\\\"'([{<`炸（，", "ff", "sk-", "a@a.", "<think>", "```\n"]
_SINGLES += ['\\"', "\\'", 'a="', "score: 1"]
_PAIRS = [a + b for a in ("a", "1", " ") for b in "a1 .@-_=:/\\\"'(<\n炸" if a != b]
UNITS = [*_SINGLES, *_PAIRS]
ENDINGS = ("", "!")
_FLAGS_AT = {"compile": 1, "split": 3, "sub": 4, "subn": 4}


def _call_sites() -> Iterator[tuple[str, ast.Call, bool]]:
    """(file, call, at module level) for each ``re.<function>(...)`` call in the package."""
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        in_function: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                in_function.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in FUNCTIONS
                and node.args
            ):
                yield path.relative_to(SOURCE).as_posix(), node, id(node) not in in_function


def _flags(call: ast.Call) -> ast.expr | None:
    keyword = next((k.value for k in call.keywords if k.arg == "flags"), None)
    if keyword is not None:
        return keyword
    assert isinstance(call.func, ast.Attribute)
    at = _FLAGS_AT.get(call.func.attr, 2)  # re.search(pattern, string, flags)
    return call.args[at] if len(call.args) > at else None


def package_patterns() -> dict[str, re.Pattern[str]]:
    """Every regex of the package, by where it is written."""
    found: dict[str, re.Pattern[str]] = {}
    unaccounted: list[str] = []
    for file, call, module_level in _call_sites():
        arg = call.args[0]
        where = f"{file}:{call.lineno}"
        if isinstance(arg, ast.Constant) or module_level:
            module = importlib.import_module("fleetgate." + file[:-3].replace("/", "."))
            namespace = vars(module)
            flags_expr = _flags(call)
            flags = eval(ast.unparse(flags_expr), namespace) if flags_expr is not None else 0
            found[where] = re.compile(eval(ast.unparse(arg), namespace), flags)
        elif (file, ast.unparse(arg)) not in BUILT_ELSEWHERE:
            unaccounted.append(f"{where}: {ast.unparse(arg)}")
    assert not unaccounted, f"regexes built at run time, not tested: {unaccounted}"
    words = WordListCheck(default_word_lists(), reply_lists=default_reply_word_lists())
    for check in (words, words._reply):
        assert check is not None and check._latin is not None
        found[f"word list {check._latin.pattern[:40]}..."] = check._latin
        for pattern, category in check._patterns:
            found[f"word list {category}: {pattern.pattern[:40]}..."] = pattern
    return found


def _seconds(pattern: re.Pattern[str], text: str, tries: int) -> float:
    """The best of ``tries`` scans, the garbage collector off: a full collection of a test
    worker's large heap, set off by the 100,000 match objects of the long text, was counted
    as the regex's own time (a loaded CI run saw 57-99x for patterns that take one
    character per match)."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(tries):
            start = time.perf_counter()
            for _ in pattern.finditer(text):
                pass
            best = min(best, time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return best


def superlinear(pattern: re.Pattern[str]) -> str | None:
    """How ``pattern`` scales worse than linearly on an adversarial text, or None."""
    for unit in UNITS:
        for ending in ENDINGS:
            small, large = (unit * (n // len(unit)) + ending for n in SIZES)
            if _seconds(pattern, small, 1) < QUICK_S:
                continue
            t_small = _seconds(pattern, small, 3)
            if t_small < QUICK_S:
                continue
            if t_small > GIVE_UP_S:
                return f"{unit!r}*{len(small) // len(unit)}+{ending!r}: {t_small:.2f}s"
            # a loaded machine can slow one run: the slower ratio must hold on a second look
            ratios = []
            for _ in range(2):
                ratio = _seconds(pattern, large, 2) / _seconds(pattern, small, 3)
                ratios.append(ratio)
                if ratio <= MAX_RATIO:
                    break
            if min(ratios) > MAX_RATIO:
                return f"{unit!r}+{ending!r}: {SIZES[1]} chars take {min(ratios):.0f}x {SIZES[0]}"
    return None


def test_every_regex_call_site_is_found() -> None:
    patterns = package_patterns()
    # the ones of the findings of issue #31 are among them (a guard on the enumeration itself)
    sources = {p.pattern for p in patterns.values()}
    assert any("@[A-Za-z0-9-]+" in s for s in sources)  # the e-mail detector (pii)
    assert len(patterns) > 70


def test_every_regex_is_linear_on_adversarial_input() -> None:
    slow = {}
    for where, pattern in package_patterns().items():
        problem = superlinear(pattern)
        if problem is not None:
            slow[where] = f"{pattern.pattern[:80]!r}: {problem}"
    assert not slow, "super-linear regexes:\n" + "\n".join(f"{k}: {v}" for k, v in slow.items())
