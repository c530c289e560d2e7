"""Trace replay: Mooncake JSONL and Azure LLM inference CSV traces.

- Mooncake: one JSON object a line with ``timestamp`` (milliseconds), ``input_length``,
  ``output_length`` and ``hash_ids`` (one id per ``block_size``-token block of the prompt;
  equal ids mean equal blocks, so shared prefixes in the trace are shared prefixes on the wire).
- Azure: CSV with ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``), ``ContextTokens`` and
  ``GeneratedTokens``.

Each request gets ``at`` = seconds since the trace's first request, divided by ``speedup``.
"""

from __future__ import annotations

import csv
import random
from datetime import datetime
from pathlib import Path

import orjson

from fleetgate.bench.datasets import words_text
from fleetgate.bench.spec import RequestSpec
from fleetgate.errors import InvalidRequest

__all__ = ["load_azure", "load_mooncake", "parse_azure_timestamp"]


def load_mooncake(
    path: Path, *, n: int | None = None, block_size: int = 512, speedup: float = 1.0
) -> list[RequestSpec]:
    """Requests of a Mooncake trace, prompts built block by block from ``hash_ids``."""
    blocks: dict[int, str] = {}
    specs: list[RequestSpec] = []
    t0: float | None = None
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if n is not None and len(specs) >= n:
                break
            try:
                row = orjson.loads(line)
                ts = float(row["timestamp"]) / 1000.0
                inp, out = int(row["input_length"]), int(row["output_length"])
                hashes = [int(h) for h in row.get("hash_ids", [])]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise InvalidRequest(f"{path}:{lineno}: bad Mooncake row ({exc})") from exc
            t0 = ts if t0 is None else t0
            prompt = _prompt_from_blocks(hashes, inp, block_size, blocks)
            specs.append(
                RequestSpec(
                    prompt=prompt,
                    input_len=max(1, inp),
                    output_len=max(1, out),
                    at=(ts - t0) / speedup,
                )
            )
    return specs


def _prompt_from_blocks(hashes: list[int], inp: int, block_size: int, cache: dict[int, str]) -> str:
    parts: list[str] = []
    remaining = max(1, inp)
    for h in hashes:
        if remaining <= 0:
            break
        if h not in cache:
            cache[h] = words_text(random.Random(h), block_size)
        take = min(block_size, remaining)
        # Each word is " xxxx": cut by words so the block stays a token-exact prefix.
        parts.append(cache[h] if take == block_size else _first_words(cache[h], take))
        remaining -= take
    if remaining > 0:
        parts.append(words_text(random.Random(len(cache) * 7919 + inp), remaining))
    return "".join(parts)


def _first_words(text: str, k: int) -> str:
    words = text.split(" ")[1 : k + 1]
    return "".join(" " + w for w in words)


def parse_azure_timestamp(text: str) -> float:
    """Seconds since the epoch for Azure's ``YYYY-MM-DD HH:MM:SS.fffffff`` (7 digits allowed)."""
    head, _, frac = text.strip().partition(".")
    base = datetime.fromisoformat(head)
    micro = int((frac + "000000")[:6]) if frac else 0
    return base.timestamp() + micro / 1e6


def load_azure(path: Path, *, n: int | None = None, speedup: float = 1.0) -> list[RequestSpec]:
    """Requests of an Azure LLM inference trace (synthetic prompts of ``ContextTokens``)."""
    specs: list[RequestSpec] = []
    rng = random.Random(0)
    t0: float | None = None
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        for lineno, row in enumerate(reader, 2):
            if n is not None and len(specs) >= n:
                break
            try:
                ts = parse_azure_timestamp(row["TIMESTAMP"])
                inp, out = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidRequest(f"{path}:{lineno}: bad Azure row ({exc})") from exc
            t0 = ts if t0 is None else t0
            specs.append(
                RequestSpec(
                    prompt=words_text(rng, max(1, inp)),
                    input_len=max(1, inp),
                    output_len=max(1, out),
                    at=(ts - t0) / speedup,
                )
            )
    return specs
