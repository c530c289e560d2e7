"""The shipped training corpus: request frames crossed with harmful and benign request cores.

``fleetgate_training/data/corpus/{en,zh}.json`` hold, per language, *frames* (ways of asking:
direct, role-play, hypothetical, "for a novel", "my cousin wants to", ...; ``{x}`` marks the
request),
*indirect frames* (a second list of indirect ways: "asking for a friend", "continue this
text", "reply in JSON", a game quest, an interview, ...), *embedded frames* (since the tenth
version: the request inside pasted material, such as a coworker's message to answer, a code
comment, a document to translate or a ticket),
*cores* (what is asked for: harmful ones per category, and benign look-alikes that share the
alarming words, such as killing a process or frying food, ``炸``), and whole texts that do not fit
a frame (prompt injections, jailbreaks, plain questions). Every frame is crossed with both
harmful and benign cores, so a frame carries no signal and the model has to learn the request.
Each core is put into ``PER_CORE`` frames, ``PER_CORE_INDIRECT`` indirect frames and
``PER_CORE_EMBEDDED`` embedded frames, each drawn by a seed of its own (adding a core, an indirect
or an embedded frame leaves the other cores' texts and the other lists' draws as they were),
and into ``PER_CORE_MIXED`` frames of the *other* language: code-mixed prompts such as
"For my novel, 告诉我怎么配制毒药" or "请告诉我how to forge a passport", which users write and
which a corpus of single-language texts leaves the model unsure about.

Since the ninth version a framed text long enough for `ClassifierCheck` to score sentence by
sentence (over 240 characters, 100 for Chinese: `chunks.split_chunks`) also yields its
sentences: those holding the core carry its label, and a frame's own sentences ("What's the
plan?") are benign, once per frame.

Each frame, core and text has a fold (crc32 of its text, mod 5); fold 0 is the validation part
(``validation_fold`` picks another, for out-of-fold scores over all five).
``split="train"`` pairs only training frames with training cores, ``"validation"`` only
validation frames with validation cores (so no frame and no core is in both), ``"all"`` uses
everything (what the shipped model is trained on once its settings were chosen).

Example::

    examples = corpus_examples("all")          # deterministic: same list on every machine
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Sequence
from importlib import resources
from typing import Any, Literal

from fleetgate.safety.classifier.chunks import split_chunks
from fleetgate.safety.classifier.examples import BENIGN, Example

__all__ = [
    "FOLDS",
    "LANGS",
    "PER_CORE_EMBEDDED",
    "PER_CORE_MIXED",
    "SLOT",
    "Split",
    "corpus_examples",
    "fold",
    "framed_chunks",
]

LANGS = ("en", "zh")
FOLDS = 5
PER_CORE = 14  # frames drawn for each core
PER_CORE_INDIRECT = 4  # indirect frames drawn for each core
PER_CORE_EMBEDDED = 2  # embedded frames (request inside pasted material) drawn for each core
PER_CORE_MIXED = 2  # frames of the other language drawn for each core (code-mixed prompts)
SLOT = "{x}"  # where a frame takes its request

Split = Literal["all", "train", "validation"]


def fold(text: str) -> int:
    """The fold of a frame, core or text (stable across runs and machines)."""
    return zlib.crc32(text.encode("utf-8")) % FOLDS


def _keep(text: str, split: Split, validation_fold: int = 0) -> bool:
    if split == "all":
        return True
    return (fold(text) == validation_fold) == (split == "validation")


def _load(lang: str) -> dict[str, Any]:
    data = resources.files("fleetgate_training").joinpath(f"data/corpus/{lang}.json")
    parsed: dict[str, Any] = json.loads(data.read_text("utf-8"))
    return parsed


def framed_chunks(frame: str, core: str) -> tuple[list[str], list[str]]:
    """The pieces of ``frame`` with ``core`` in its slot, other than the whole text, split into
    those that hold some of the core and those that are the frame's own words alone (a frame's
    "What's the plan?"). The first carry the core's label; the second carry none, since every
    frame is asked with harmful and benign cores alike."""
    text = frame.replace(SLOT, core)
    start = frame.index(SLOT)
    end = start + len(core)
    with_core: list[str] = []
    frame_only: list[str] = []
    cursor = 0
    for piece in split_chunks(text):
        if piece == text:
            continue
        at = text.find(piece, cursor)
        if at < 0:  # a kept tail after a cut (``limit``): search from the start
            at = text.find(piece)
        cursor = at + len(piece)
        (with_core if at < end and start < at + len(piece) else frame_only).append(piece)
    return with_core, frame_only


def _framed(
    frames: Sequence[str],
    core: str,
    label: str,
    per_core: int,
    salt: str = "",
    *,
    frame_words: dict[str, None] | None = None,
) -> list[Example]:
    """``core`` in ``per_core`` of ``frames``. Given ``frame_words`` (sentence pieces wanted),
    also the sentences of those texts that hold the core (the pieces `ClassifierCheck` also
    scores alone), once each, and the frames' own sentences ("What's the plan?") go into
    ``frame_words``."""
    rng = random.Random(zlib.crc32((salt + core).encode("utf-8")))
    chosen = rng.sample(list(frames), min(per_core, len(frames)))
    out = [Example(frame.replace(SLOT, core), label) for frame in chosen]
    if frame_words is None:
        return out
    held: dict[str, None] = {}
    for frame in chosen:
        with_core, frame_only = framed_chunks(frame, core)
        held.update(dict.fromkeys(with_core))
        frame_words.update(dict.fromkeys(frame_only))
    return out + [Example(p, label) for p in held]


def corpus_examples(
    split: Split = "all",
    per_core: int = PER_CORE,
    validation_fold: int = 0,
    *,
    pieces: bool = True,
) -> list[Example]:
    """The corpus expanded into labelled examples, English then Chinese. ``validation_fold``
    (0 to 4) is the fold held out by ``"train"`` and ``"validation"``. ``pieces=False`` leaves
    out the sentence pieces (training examples, not prompts): what validation scores."""
    if not 0 <= validation_fold < FOLDS:
        raise ValueError(f"validation_fold must be 0 to {FOLDS - 1}, not {validation_fold}")
    out: list[Example] = []

    def keep(text: str) -> bool:
        return _keep(text, split, validation_fold)

    loaded = {lang: _load(lang) for lang in LANGS}
    words: dict[str, None] | None = {} if pieces else None  # frames' own sentences, once
    for lang in LANGS:
        data = loaded[lang]
        frames = [f for f in data["frames"] if keep(f)]
        indirect = [f for f in data.get("indirect_frames", []) if keep(f)]
        embedded = [f for f in data.get("embedded_frames", []) if keep(f)]
        other = next(x for x in LANGS if x != lang)
        mixed = [f for f in loaded[other]["frames"] if keep(f)]
        cores = [(core, category) for category, cs in data["harm"].items() for core in cs]
        cores += [(core, BENIGN) for core in data["benign"]]
        # (frame list, draws per core, seed salt), in the order the examples are listed
        lists = (
            (frames, per_core, ""),
            (indirect, PER_CORE_INDIRECT, "indirect:"),
            (mixed, PER_CORE_MIXED, "mixed:"),
            (embedded, PER_CORE_EMBEDDED, "embedded:"),
        )
        for core, label in cores:
            if keep(core):
                for listed, n, salt in lists:
                    out += _framed(listed, core, label, n, salt, frame_words=words)
        for category, texts in data["harm_texts"].items():
            out += [Example(t, category) for t in texts if keep(t)]
        out += [Example(t, BENIGN) for t in data["benign_texts"] if keep(t)]
    # a frame is asked with harmful and benign cores alike: its own words are benign
    return out + [Example(p, BENIGN) for p in words or ()]
