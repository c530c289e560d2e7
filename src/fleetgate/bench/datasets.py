"""Datasets: synthetic prompts with length distributions and shared-prefix groups, JSONL
prompt files and ShareGPT files. Trace files live in ``traces.py``.

Synthetic text is built from short lowercase words (at most 4 letters, each preceded by a
space), which most BPE tokenizers and fleetgate's simulator count as one token per word, so
``input_len`` is close to the server's ``prompt_tokens``. For files, lengths are estimated as
``ceil(words * 4 / 3)`` unless the file gives them; the server's usage wins when present.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fleetgate.bench.lengths import LengthDist
from fleetgate.bench.spec import RequestSpec
from fleetgate.errors import InvalidRequest

__all__ = [
    "WORDS",
    "estimate_tokens",
    "load_jsonl",
    "load_sharegpt",
    "synthetic",
    "words_text",
]

_WORD_TEXT = (
    "the of and to in is it for on was with as at by be this from or are an had not but what "
    "all were when we can said one each she do how if will up out many then them so some her "
    "make like him into time has look two more go see way could no day did get come made may "
    "part over new sound take only work know place year live me back give most very after "
    "our just name good man word say help line turn much mean move same tell boy does set "
    "want air well also play small end put home read hand port even land here must big high "
    "such act why ask men went kind off need near self four head ever"
)
WORDS = tuple(w for w in _WORD_TEXT.split() if len(w) <= 4)


def words_text(rng: random.Random, n: int) -> str:
    """``n`` random one-token words, each with a leading space."""
    return "".join(" " + w for w in rng.choices(WORDS, k=n))


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: four tokens per three words, at least 1."""
    return max(1, math.ceil(len(text.split()) * 4 / 3))


def synthetic(
    n: int,
    input_len: LengthDist,
    output_len: LengthDist,
    *,
    seed: int = 0,
    prefix_groups: int = 0,
    prefix_len: int = 0,
    stream_ratio: float = 1.0,
) -> list[RequestSpec]:
    """``n`` synthetic requests.

    With ``prefix_groups > 0`` every request starts with one of that many shared prefixes of
    ``prefix_len`` tokens (assigned round-robin), followed by its own random suffix so the total
    is the sampled input length (never shorter than the prefix plus one token).
    ``stream_ratio`` is the fraction of requests that stream (the rest do not), spread evenly.
    """
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    ins = input_len.sample(nrng, n)
    outs = output_len.sample(nrng, n)
    prefixes = [words_text(rng, prefix_len) for _ in range(prefix_groups)]
    specs = []
    for i in range(n):
        prefix = prefixes[i % prefix_groups] if prefix_groups else ""
        plen = prefix_len if prefix_groups else 0
        total = max(ins[i], plen + 1)
        prompt = prefix + words_text(rng, total - plen)
        stream = _streams(i, stream_ratio)
        specs.append(RequestSpec(prompt=prompt, input_len=total, output_len=outs[i], stream=stream))
    return specs


def _streams(i: int, ratio: float) -> bool:
    # Even spread: request i streams when floor((i+1)*r) > floor(i*r).
    return math.floor((i + 1) * ratio) > math.floor(i * ratio)


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InvalidRequest(f"{path}:{lineno}: not JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise InvalidRequest(f"{path}:{lineno}: expected a JSON object")
            yield row


def load_jsonl(
    path: Path, *, n: int | None, default_output_len: int, stream_ratio: float = 1.0
) -> list[RequestSpec]:
    """Prompts from a JSONL file: ``{"prompt": ...}`` (or ``"text"``) or ``{"messages": [...]}``,
    optional ``"output_len"``/``"max_tokens"`` and ``"input_len"``. Cycles when ``n`` exceeds the
    file's rows."""
    rows: list[RequestSpec] = []
    for row in _read_lines(path):
        messages = row.get("messages")
        prompt = row.get("prompt", row.get("text"))
        if isinstance(messages, list):
            text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            msgs: tuple[dict[str, Any], ...] | None = tuple(messages)
        elif isinstance(prompt, str):
            text, msgs = prompt, None
        else:
            raise InvalidRequest(f"{path}: each row needs 'prompt', 'text' or 'messages'")
        out = int(row.get("output_len", row.get("max_tokens", default_output_len)))
        inp = int(row.get("input_len", estimate_tokens(text)))
        rows.append(RequestSpec(prompt=text, input_len=inp, output_len=out, messages=msgs))
    return _cycle(rows, n, stream_ratio, path)


def load_sharegpt(
    path: Path, *, n: int | None, max_output_len: int | None = None, stream_ratio: float = 1.0
) -> list[RequestSpec]:
    """First human turn of each ShareGPT conversation as the prompt; the following assistant
    turn's estimated length as ``output_len`` (capped by ``max_output_len``)."""
    data = orjson.loads(path.read_bytes())
    if not isinstance(data, list):
        raise InvalidRequest(f"{path}: a ShareGPT file is a JSON list of conversations")
    rows: list[RequestSpec] = []
    for conv in data:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        human, answer = turns[0], turns[1]
        if human.get("from") not in ("human", "user") or not human.get("value"):
            continue
        out = estimate_tokens(str(answer.get("value", "")))
        if max_output_len is not None:
            out = min(out, max_output_len)
        prompt = str(human["value"])
        rows.append(RequestSpec(prompt=prompt, input_len=estimate_tokens(prompt), output_len=out))
    return _cycle(rows, n, stream_ratio, path)


def _cycle(
    rows: list[RequestSpec], n: int | None, stream_ratio: float, path: Path
) -> list[RequestSpec]:
    if not rows:
        raise InvalidRequest(f"{path}: no usable prompts")
    count = len(rows) if n is None else n
    return [
        RequestSpec(
            prompt=rows[i % len(rows)].prompt,
            input_len=rows[i % len(rows)].input_len,
            output_len=rows[i % len(rows)].output_len,
            stream=_streams(i, stream_ratio),
            messages=rows[i % len(rows)].messages,
        )
        for i in range(count)
    ]
