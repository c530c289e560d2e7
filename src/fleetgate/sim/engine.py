"""The simulated engine: a continuous-batching scheduler over a paged KV cache.

One asyncio task runs scheduler steps. Each step: running requests that finished prefill get
one token each (decode); running requests still in prefill get a chunk of their uncached prompt;
waiting requests are admitted first-come-first-served (under the ``priority`` policy: by
priority, then arrival) while there are free sequence slots, KV blocks and token budget. When a
decoding request needs a new block and none is free a running one is preempted (its blocks
freed, recomputed later): the most recently admitted, or under ``priority`` the least important.
As in vLLM v1, a waiting request never preempts a running one for a sequence slot: with
``max_num_seqs`` running, even a more important request waits for one to end
(vllm-project/vllm#40004), unless ``preempt_for_priority`` (vLLM V0's behaviour) is set.

Step time: ``prefill_ms_per_token * prefill_tokens
+ decode_ms_per_step * (1 + decode_batch_factor * (decoding - 1))
+ encode_ms_per_image_token * image tokens encoded`` (the images of the requests admitted in
the step that this engine encodes itself, see sim/encoder.py). In instant mode (both ms
values 0) requests skip the loop: prefix-cache accounting happens and all tokens are emitted at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable

from fleetgate.sim.config import SimConfig
from fleetgate.sim.kv import BlockManager
from fleetgate.sim.metrics import SimMetrics
from fleetgate.sim.sequence import SeqEvent, SeqSpec, SeqState, Sequence
from fleetgate.tasks import Background

__all__ = ["Engine"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Engine:
    """Owns the waiting queue, the running batch and the KV cache of one simulated model."""

    def __init__(self, config: SimConfig, metrics: SimMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.kv = BlockManager(config.kv_blocks, config.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.steps = 0
        self._encode_tokens = 0  # image tokens encoded in the step being scheduled
        self._wake = asyncio.Event()
        self._task = Background(self._run, name="fleetgate-sim-engine")
        self._loop = asyncio.get_running_loop()
        self._m = (config.model,)
        metrics.bind(
            running=lambda: len(self.running),
            waiting=lambda: len(self.waiting),
            kv_usage=lambda: self.kv.usage,
            block_size=config.block_size,
            num_blocks=config.kv_blocks,
        )

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the scheduler task (not needed in instant mode)."""
        if not self.config.instant:
            self._task.start()

    async def aclose(self) -> None:
        """Stop the scheduler and abort everything still queued or running."""
        await self._task.aclose()
        for seq in [*self.waiting, *self.running]:
            if self.abort(seq):
                # Wake the handler waiting for this sequence so it can end its response.
                seq.sink.put_nowait(SeqEvent(seq.spec.index, "", "abort"))

    # ----------------------------------------------------------------- API

    def submit(self, specs: Iterable[SeqSpec], sink: asyncio.Queue[SeqEvent]) -> list[Sequence]:
        """Queue sequences; their tokens arrive on ``sink`` as ``SeqEvent``s."""
        now = self._loop.time()
        seqs = [
            Sequence(spec, self.kv.block_hashes(spec.prompt, spec.salt), sink, now)
            for spec in specs
        ]
        if self.config.instant:
            for seq in seqs:
                self._run_instant(seq)
        else:
            for seq in seqs:
                self._enqueue(seq, front=False)
            self._wake.set()
        return seqs

    def cached_prompt_tokens(self, spec: SeqSpec) -> int:
        """Prompt tokens of ``spec`` this engine's prefix cache holds now (no side effects)."""
        kv = self.kv
        hashes = kv.block_hashes(spec.prompt, spec.salt)
        return len(kv.find_cached(hashes, len(spec.prompt))) * kv.block_size

    def abort(self, seq: Sequence) -> bool:
        """Stop a sequence and free its KV blocks; False if it had already ended."""
        if seq.done:
            return False
        if seq.state is SeqState.WAITING:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        else:
            with contextlib.suppress(ValueError):
                self.running.remove(seq)
            self.kv.release(seq.blocks)
            seq.blocks = []
        seq.state = SeqState.ABORTED
        self.metrics.success.labels(self.config.model, "abort").inc()
        return True

    # ----------------------------------------------------------------- instant mode

    def _run_instant(self, seq: Sequence) -> None:
        kv = self.kv
        hits = kv.find_cached(seq.hashes, seq.prompt_len)
        self._count_prefix(seq, len(hits))
        blocks = kv.allocate(hits, _ceil_div(seq.prompt_len + 1, kv.block_size))
        if blocks is not None:
            for i in range(len(hits), len(seq.hashes)):
                self._commit(seq, blocks, i)
            kv.release(blocks)
        seq.state = SeqState.RUNNING
        seq.scheduled_at = seq.arrival
        for _ in range(max(1, len(seq.spec.output))):
            self._emit(seq, seq.arrival)

    # ----------------------------------------------------------------- the loop

    async def _run(self) -> None:
        loop = self._loop
        cfg = self.config
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
            start = loop.time()
            prefill, decode = self._schedule(start)
            if not prefill and not decode:
                self._fail_unschedulable()
                await asyncio.sleep(0)
                continue
            seconds = cfg.prefill_ms_per_token * sum(n for _, n in prefill)
            seconds += cfg.encode_ms_per_image_token * self._encode_tokens
            self._encode_tokens = 0
            if decode:
                seconds += cfg.decode_ms_per_step * (
                    1.0 + cfg.decode_batch_factor * (len(decode) - 1)
                )
            delay = start + seconds / 1000.0 - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            self.steps += 1
            self._finish_step(prefill, decode, loop.time())

    def _enqueue(self, seq: Sequence, *, front: bool) -> None:
        """Into the waiting queue: at the back (new) or the front (preempted) under ``fcfs``;
        under ``priority`` by (priority, arrival)."""
        if self.config.scheduling_policy == "fcfs":
            if front:
                self.waiting.appendleft(seq)
            else:
                self.waiting.append(seq)
            return
        key = (seq.spec.priority, seq.arrival)
        at = len(self.waiting)
        while at > 0:
            prev = (self.waiting[at - 1].spec.priority, self.waiting[at - 1].arrival)
            if prev < key or (prev == key and not front):  # preempted: before its equals
                break
            at -= 1
        self.waiting.insert(at, seq)

    def _preempt_for_priority(self) -> None:
        """``preempt_for_priority``: while the batch is full and the first waiting request is
        more important than the least important running one (newest first), preempt that one."""
        while self.waiting and len(self.running) >= self.config.max_num_seqs:
            victim = self._victim()
            if victim.spec.priority <= self.waiting[0].spec.priority:
                return
            self._preempt(victim)

    def _schedule(self, now: float) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        cfg = self.config
        if cfg.preempt_for_priority and cfg.scheduling_policy == "priority":
            self._preempt_for_priority()
        budget = self.config.max_num_batched_tokens
        prefill: list[tuple[Sequence, int]] = []
        decode: list[Sequence] = []
        preempted = False
        for seq in list(self.running):
            if seq.state is not SeqState.RUNNING:
                continue
            if seq.prefilling:
                chunk = min(budget, seq.prefill_target - seq.num_computed)
                if chunk > 0:
                    prefill.append((seq, chunk))
                    budget -= chunk
                continue
            if self._reserve_decode_slot(seq):
                decode.append(seq)
                budget -= 1
            else:
                preempted = True
        if not preempted:
            self._admit(now, budget, prefill)
        return prefill, decode

    def _reserve_decode_slot(self, seq: Sequence) -> bool:
        """Make room for one more token of ``seq``, preempting (`_victim`); False if ``seq``
        itself was preempted."""
        while len(seq.blocks) * self.kv.block_size < seq.num_computed + 1:
            if self.kv.grow(seq.blocks):
                return True
            victim = self._victim()
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _victim(self) -> Sequence:
        """Who gives up its KV blocks when a running request needs one and none is free: the
        most recently admitted under ``fcfs``; under ``priority`` the least important, newest
        first (vLLM v1: ``max(running, key=(priority, arrival_time))``)."""
        if self.config.scheduling_policy == "priority":
            return max(self.running, key=lambda s: (s.spec.priority, s.arrival))
        return self.running[-1]

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.release(seq.blocks)
        seq.blocks = []
        seq.num_computed = 0
        seq.committed_blocks = 0
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        self._enqueue(seq, front=True)
        self.metrics.preemptions.labels(*self._m).inc()

    def _admit(self, now: float, budget: int, prefill: list[tuple[Sequence, int]]) -> None:
        kv = self.kv
        max_seqs = self.config.max_num_seqs
        while self.waiting and budget > 0 and len(self.running) < max_seqs:
            seq = self.waiting[0]
            hits = kv.find_cached(seq.hashes, seq.prompt_len)
            blocks = kv.allocate(hits, _ceil_div(seq.prefill_target + 1, kv.block_size))
            if blocks is None:
                return
            self.waiting.popleft()
            self._count_prefix(seq, len(hits))
            seq.blocks = blocks
            seq.num_computed = seq.committed_blocks = len(hits)
            seq.num_computed *= kv.block_size
            if seq.spec.remote_prefill:  # its KV was transferred: only the last token is run
                seq.num_computed = max(seq.num_computed, seq.prefill_target - 1)
            seq.state = SeqState.RUNNING
            if not seq.encoded:
                seq.encoded = True
                self._encode_tokens += seq.spec.encode_tokens
            if seq.scheduled_at is None:
                seq.scheduled_at = now
                self.metrics.queue_time.labels(*self._m).observe(now - seq.arrival)
            self.running.append(seq)
            chunk = min(budget, seq.prefill_target - seq.num_computed)
            prefill.append((seq, chunk))
            budget -= chunk

    def _count_prefix(self, seq: Sequence, hit_blocks: int) -> None:
        hit_tokens = hit_blocks * self.kv.block_size
        self.metrics.prefix_queries.labels(*self._m).inc(seq.prompt_len)
        self.metrics.prefix_hits.labels(*self._m).inc(hit_tokens)
        if seq.cached_tokens < 0:
            seq.cached_tokens = hit_tokens
            self.metrics.prompt_tokens.labels(*self._m).inc(seq.prompt_len)

    def _fail_unschedulable(self) -> None:
        # Nothing runs and the head of the queue still does not fit: it never will.
        if not self.running and self.waiting:
            seq = self.waiting[0]
            self.abort(seq)
            seq.sink.put_nowait(SeqEvent(seq.spec.index, "", "abort"))

    def _finish_step(
        self, prefill: list[tuple[Sequence, int]], decode: list[Sequence], now: float
    ) -> None:
        kv = self.kv
        size = kv.block_size
        for seq, chunk in prefill:
            if seq.state is not SeqState.RUNNING:
                continue
            seq.num_computed += chunk
            full = min(seq.num_computed // size, len(seq.hashes))
            for i in range(seq.committed_blocks, full):
                self._commit(seq, seq.blocks, i)
            seq.committed_blocks = max(seq.committed_blocks, full)
            if not seq.prefilling:
                self._emit(seq, now)
        for seq in decode:
            if seq.state is SeqState.RUNNING:
                seq.num_computed += 1
                self._emit(seq, now)

    def _commit(self, seq: Sequence, blocks: list[int], i: int) -> None:
        size = self.kv.block_size
        self.kv.commit(
            blocks[i],
            seq.hashes[i],
            tokens=seq.spec.prompt[i * size : (i + 1) * size],
            parent=seq.hashes[i - 1] if i > 0 else None,
            salt=seq.spec.salt,
        )

    def _emit(self, seq: Sequence, now: float) -> None:
        """Produce the next token of ``seq``; finish it after its last planned token."""
        output = seq.spec.output
        m = self._m
        if seq.first_token_at is None:
            seq.first_token_at = now
            self.metrics.ttft.labels(*m).observe(now - seq.arrival)
        elif seq.last_token_at is not None:
            self.metrics.itl.labels(*m).observe(now - seq.last_token_at)
        seq.last_token_at = now
        text = output[seq.num_generated] if seq.num_generated < len(output) else ""
        if seq.num_generated < len(output):
            seq.num_generated += 1
            self.metrics.generation_tokens.labels(*m).inc()
        if seq.num_generated < len(output):
            seq.sink.put_nowait(SeqEvent(seq.spec.index, text))
            return
        reason = seq.spec.finish_reason
        seq.sink.put_nowait(SeqEvent(seq.spec.index, text, reason))
        if not self.config.instant:
            self.running.remove(seq)
        self.kv.release(seq.blocks)
        seq.blocks = []
        seq.state = SeqState.FINISHED
        self.metrics.success.labels(self.config.model, reason).inc()
        self.metrics.e2e.labels(*m).observe(now - seq.arrival)
        if seq.num_generated > 1:
            decode_time = now - seq.first_token_at
            self.metrics.tpot.labels(*m).observe(decode_time / (seq.num_generated - 1))
