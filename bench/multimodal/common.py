"""Shared bits of the multimodal benchmarks: an in-process gateway in front of a simulator,
streamed chat requests timed chunk by chunk, percentiles."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.http.serving import served
from fleetgate.sse import SSEParser

MASTER = "sk-bench"


@asynccontextmanager
async def gateway(config: dict[str, Any]) -> AsyncIterator[str]:
    """An in-process gateway on a free 127.0.0.1 port; yields its base URL."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(master_key=MASTER, data_dir=Path(tmp), watch_config=False)
        state = build_state(settings, parse_config(config))
        async with served(create_app(settings, state=state)) as url:
            yield url


@dataclass
class StreamTiming:
    """Seconds from sending: first text, first audio, last text, end; and the text."""

    first_text: float | None = None
    first_audio: float | None = None
    last_text: float | None = None
    end: float = 0.0
    text: list[str] = field(default_factory=list)


async def timed_stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> StreamTiming:
    """Send a streamed chat request and time its chunks."""
    start = time.perf_counter()
    out = StreamTiming()
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{resp.status}: {await resp.text()}")
        parser = SSEParser()
        async for data in resp.content.iter_any():
            for _, text in parser.feed(data):
                if not text.startswith("{"):
                    continue
                chunk = orjson.loads(text)
                now = time.perf_counter() - start
                delta = chunk["choices"][0].get("delta", {}) if chunk.get("choices") else {}
                if delta.get("audio") and out.first_audio is None:
                    out.first_audio = now
                if delta.get("content"):
                    out.first_text = out.first_text if out.first_text is not None else now
                    out.last_text = now
                    out.text.append(delta["content"])
    out.end = time.perf_counter() - start
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q`` percentile (0-100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
