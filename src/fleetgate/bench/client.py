"""The request function: send one pre-built OpenAI request and time it as vLLM's benchmark does.

Definitions (same as ``vllm/benchmarks/lib/endpoint_request_func.py``):

- the clock starts right before ``session.post`` (``sent``);
- TTFT = first SSE data message carrying output - ``sent``;
- ITL = gaps between consecutive messages carrying output (one entry per chunk);

"Carrying output" means a choice with non-empty ``text`` / ``delta.content`` /
``delta.reasoning_content`` / ``delta.tool_calls``. vLLM's client counts any chunk with a
``choices`` entry; we skip role-only chunks because some servers send
``{"delta": {"role": "assistant"}}`` before prefill finishes (vLLM and fleetgate's simulator
send it with the first token), which would make TTFT a measure of the HTTP round trip.
- latency (E2E) = last data message - ``sent``;
- output tokens = ``usage.completion_tokens`` (requested with ``stream_options.include_usage``).

Bodies are encoded once before the run (``build_body``) so the hot path allocates little.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from fleetgate.bench.spec import RequestRecord, RequestSpec
from fleetgate.closing import AsyncClosing
from fleetgate.providers.connections import ConnectionPool, PooledResponse
from fleetgate.sse import SSEParser

__all__ = ["BenchClient", "Endpoint", "Target", "build_body", "send_request"]

Endpoint = Literal["chat", "completions"]
_DONE = "[DONE]"


@dataclass(frozen=True)
class Target:
    """Where and how to send: ``base_url`` like ``http://127.0.0.1:4000/v1``."""

    base_url: str
    model: str
    endpoint: Endpoint = "chat"
    api_key: str | None = None
    ignore_eos: bool = False
    continuous_usage: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0

    @property
    def url(self) -> str:
        """The full endpoint URL."""
        path = "chat/completions" if self.endpoint == "chat" else "completions"
        return self.base_url.rstrip("/") + "/" + path

    def headers(self) -> dict[str, str]:
        """Request headers (authorization when an API key is set)."""
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def build_body(spec: RequestSpec, target: Target) -> bytes:
    """The JSON body for ``spec``: greedy, ``max_tokens`` = ``output_len``, usage requested."""
    body: dict[str, Any] = {"model": target.model, "temperature": 0.0, "stream": spec.stream}
    if target.endpoint == "chat":
        body["messages"] = (
            list(spec.messages) if spec.messages else [{"role": "user", "content": spec.prompt}]
        )
        body["max_completion_tokens"] = spec.output_len
    else:
        body["prompt"] = spec.prompt
    body["max_tokens"] = spec.output_len
    if spec.stream:
        opts: dict[str, bool] = {"include_usage": True}
        if target.continuous_usage:
            opts["continuous_usage_stats"] = True
        body["stream_options"] = opts
    if target.ignore_eos:
        body["ignore_eos"] = True
    body.update(target.extra_body)
    return orjson.dumps(body)


async def send_request(
    client: BenchClient,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    record: RequestRecord,
    t0: float,
) -> None:
    """Send one request and fill ``record`` (times relative to ``t0``, a perf_counter value)."""
    st = time.perf_counter()
    record.sent = st - t0
    resp: PooledResponse | None = None
    try:
        async with client.slot(), asyncio.timeout(client.timeout_s):
            resp = await client.pool.post(
                url, body, headers, connect_timeout=min(10.0, client.timeout_s)
            )
            record.status = resp.status
            if resp.status != 200:
                text = (await resp.read())[:300].decode("utf-8", "replace")
                record.error = f"HTTP {resp.status}: {text}"
                record.latency = time.perf_counter() - st
                return
            if record.stream:
                await _read_stream(resp, record, st)
            else:
                await _read_whole(resp, record, st)
            resp.release()
    except Exception as exc:  # every failure becomes a failed record, never a crash
        record.success = False
        record.error = f"{type(exc).__name__}: {exc}"[:300]
        record.latency = time.perf_counter() - st
    finally:
        if resp is not None:
            resp.close()  # no-op once released


class BenchClient(AsyncClosing):
    """The load generator's HTTP client: fleetgate's lean HTTP/1.1 pool (so the client's own
    cost stays small at thousands of requests per second), an optional cap on connections in
    use, and a per-request time limit."""

    def __init__(self, timeout_s: float, connections: int | None = None) -> None:
        self.pool = ConnectionPool(max_idle_per_host=max(512, connections or 0))
        self.timeout_s = timeout_s
        self._sem = asyncio.Semaphore(connections) if connections else None

    def slot(self) -> contextlib.AbstractAsyncContextManager[object]:
        return self._sem if self._sem is not None else contextlib.nullcontext()

    async def aclose(self) -> None:
        await self.pool.aclose()


async def _read_whole(resp: PooledResponse, record: RequestRecord, st: float) -> None:
    data = orjson.loads(await resp.read())
    record.latency = time.perf_counter() - st
    usage = data.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        record.output_tokens = int(usage["completion_tokens"])
        record.prompt_tokens = int(usage.get("prompt_tokens") or record.prompt_tokens)
        record.usage_reported = True
    else:
        choice = (data.get("choices") or [{}])[0]
        text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
        record.output_tokens = len(str(text).split())
    record.success = True


def _carries_output(choices: Any) -> bool:
    # A role-only first chunk (sent by some servers before prefill ends) is not a token.
    if not choices:
        return False
    c0 = choices[0]
    delta = c0.get("delta")
    if delta is None:
        return bool(c0.get("text"))
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


async def _read_stream(resp: PooledResponse, record: RequestRecord, st: float) -> None:
    state = _StreamState(record, st)
    parser = SSEParser()
    async for chunk in resp.iter_chunks():
        ts = time.perf_counter()  # when these bytes arrived
        for _, data in parser.feed(chunk):
            state.message(data.strip(), ts)
    for _, data in parser.end():  # a last event sent without its blank line
        state.message(data.strip(), time.perf_counter())
    state.finish()


class _StreamState:
    """Per-stream bookkeeping, as vLLM's benchmark client keeps it."""

    def __init__(self, record: RequestRecord, st: float) -> None:
        self.record = record
        self.st = st
        self.last_choice = st
        self.last_msg = st
        self.chunks = 0
        self.seen_tokens = 0
        self.per_chunk: list[int] = []

    def message(self, payload: str, ts: float) -> None:
        if payload == _DONE or not payload:
            return
        record = self.record
        data = orjson.loads(payload)
        self.last_msg = ts
        usage = data.get("usage")
        if _carries_output(data.get("choices")):
            if self.chunks == 0:
                record.ttft = ts - self.st
            else:
                record.itl.append(ts - self.last_choice)
            self.last_choice = ts
            self.chunks += 1
            if usage and usage.get("completion_tokens") is not None:
                done = int(usage["completion_tokens"])
                if self.chunks > 1:
                    self.per_chunk.append(done - self.seen_tokens)
                self.seen_tokens = done
        if usage and usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.prompt_tokens = int(usage.get("prompt_tokens") or record.prompt_tokens)
            record.usage_reported = True

    def finish(self) -> None:
        record = self.record
        record.latency = self.last_msg - self.st
        if self.chunks == 0:
            record.error = "stream ended without a chunk carrying a choice"
            return
        if not record.usage_reported:
            record.output_tokens = self.chunks
        if self.per_chunk and len(self.per_chunk) == len(record.itl):
            record.chunk_tokens = self.per_chunk
        record.success = True
