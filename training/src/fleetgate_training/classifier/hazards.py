"""The hazard set: what is *asked*, by category, written by several authors (issue #38).

``fleetgate_training/data/hazards/<author>.json`` hold one author each: a language, a writing
style, and per hazard category harmful prompts (``direct``: plainly asked; ``indirect``: asked
politely, for a friend, or inside a task) and look-alike safe prompts (``lookalike``: the same
alarming words, or the same topic, asked for a harmless reason: killing a process, a
public figure's office address, one's own medical record, discussing a slur). Every prompt was
written for this set; none is taken or paraphrased from a published safety benchmark.

The categories are MLCommons AILuminate v1.0's hazards (`HAZARDS`). Eight are *blocked* by the
default input policy; five are only *flagged* (`Hazard.blocks` is False): their harm depends on
the deployment (adult content, advice a professional should give, IP, claims about people, and
elections), so the shipped classifier is not trained to block them and they are reported apart.

The split is by author, so no author's style, vocabulary or topic choices are on both sides:
`TEST_AUTHORS` (two per language) are never trained on; they are the held-out set of the
figures in docs/safety.md. Each test author covers every category.

Example::

    prompts = hazard_prompts("test")                  # the held-out authors
    examples = hazard_examples()                      # training authors, as classifier labels
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from fleetgate.safety.classifier.examples import BENIGN, Example

__all__ = [
    "HAZARDS",
    "KINDS",
    "TEST_AUTHORS",
    "Hazard",
    "HazardPrompt",
    "Part",
    "authors",
    "hazard_examples",
    "hazard_prompts",
    "load_hazard_jsonl",
]

KINDS = ("direct", "indirect", "lookalike")
TEST_AUTHORS = frozenset({"en_learner", "en_spec", "zh_trad", "zh_spec"})

Part = Literal["train", "test", "all"]


@dataclass(frozen=True, slots=True)
class Hazard:
    """One AILuminate hazard category: its code, its name, whether the default policy blocks
    it, and the classifier class its blocked prompts train (None: flagged only, not trained)."""

    code: str
    name: str
    blocks: bool
    label: str | None


HAZARDS: tuple[Hazard, ...] = (
    Hazard("vcr", "violent crimes", True, "violence"),
    Hazard("ncr", "non-violent crimes (fraud, scams, malware, drugs, poaching)", True, "crime"),
    Hazard("src", "sex-related crimes", True, "sex_crimes"),
    Hazard("cse", "child sexual exploitation", True, "sexual_minors"),
    Hazard("iwp", "indiscriminate weapons (CBRNE)", True, "weapons"),
    Hazard("ssh", "suicide and self-harm", True, "self_harm"),
    Hazard("hte", "hate", True, "hate"),
    Hazard("prv", "privacy (private individuals)", True, "privacy"),
    Hazard("ipv", "intellectual property", False, None),
    Hazard("dfm", "defamation", False, None),
    Hazard("ele", "elections", False, None),
    Hazard("spc", "specialized advice", False, None),
    Hazard("sxc", "sexual content (adults)", False, None),
)
_BY_CODE = {h.code: h for h in HAZARDS}


@dataclass(frozen=True, slots=True)
class HazardPrompt:
    """One prompt of the set; ``harmful`` is False for look-alikes."""

    text: str
    hazard: Hazard
    kind: str
    author: str
    lang: str

    @property
    def harmful(self) -> bool:
        return self.kind != "lookalike"


def _files() -> list[tuple[str, str]]:
    folder = resources.files("fleetgate_training").joinpath("data/hazards")
    found = [(f.name, f.read_text("utf-8")) for f in folder.iterdir() if f.name.endswith(".json")]
    return sorted(found)


def _parse(name: str, raw: str) -> list[HazardPrompt]:
    data = json.loads(raw)
    author, lang = str(data["author"]), str(data["lang"])
    out: list[HazardPrompt] = []
    for code, kinds in data["prompts"].items():
        hazard = _BY_CODE.get(code)
        if hazard is None or set(kinds) != set(KINDS):
            raise ValueError(f"{name}: category {code!r} is unknown or lacks one of {KINDS}")
        out.extend(
            HazardPrompt(str(text), hazard, kind, author, lang)
            for kind in KINDS
            for text in kinds[kind]
        )
    if {p.hazard.code for p in out} != set(_BY_CODE):
        raise ValueError(f"{name}: author {author} does not cover every category")
    return out


def hazard_prompts(part: Part = "all") -> list[HazardPrompt]:
    """The set's prompts, in a fixed order: ``part`` ``"test"`` the held-out authors,
    ``"train"`` the others."""
    prompts = [p for name, raw in _files() for p in _parse(name, raw)]
    if part == "all":
        return prompts
    return [p for p in prompts if (p.author in TEST_AUTHORS) == (part == "test")]


def load_hazard_jsonl(lines: Iterable[str], source: str = "<set>") -> list[HazardPrompt]:
    """A blind hazard set's JSONL rows (``prompt``, ``label`` ``unsafe``/``safe``,
    ``category`` a hazard code for look-alikes too, ``lang``, ``kind``, ``author``; e.g.
    ``bench/safety/data/heldout_blind5.jsonl``) as `HazardPrompt`s: a safe row is a
    ``lookalike`` whatever its kind, an unsafe one keeps its kind (default ``direct``)."""
    out: list[HazardPrompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = json.loads(line)
        hazard = _BY_CODE.get(str(row.get("category")))
        label = str(row.get("label"))
        if hazard is None or label not in ("safe", "unsafe"):
            raise ValueError(f"{source}:{n}: unknown category {row.get('category')!r} or label")
        kind = "lookalike" if label == "safe" else str(row.get("kind") or "direct")
        if kind == "lookalike" and label == "unsafe":
            raise ValueError(f"{source}:{n}: an unsafe row of kind lookalike")
        out.append(HazardPrompt(str(row["prompt"]), hazard, kind, str(row["author"]),
                                str(row["lang"])))  # fmt: skip
    return out


def authors(part: Part = "all") -> list[str]:
    """The authors of ``part``, sorted."""
    return sorted({p.author for p in hazard_prompts(part)})


def hazard_examples(part: Part = "train", repeat: int = 1) -> list[Example]:
    """Classifier examples from ``part``: a blocked category's harmful prompts under its class,
    every look-alike as benign (flagged-only categories' harmful prompts are left out: the
    classifier neither blocks nor clears them). ``repeat``: each example that many times (the
    set is small beside the framed corpus)."""
    out: list[Example] = []
    for p in hazard_prompts(part):
        if not p.harmful:
            out.append(Example(p.text, BENIGN))
        elif p.hazard.label is not None:
            out.append(Example(p.text, p.hazard.label))
    return [ex for ex in out for _ in range(repeat)]
