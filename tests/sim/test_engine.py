import asyncio
import statistics

from fleetgate.sim.config import SimConfig
from fleetgate.sim.engine import Engine
from fleetgate.sim.metrics import SimMetrics
from fleetgate.sim.sequence import SeqEvent, SeqSpec
from fleetgate.telemetry.registry import Registry


def _engine(**kwargs: object) -> Engine:
    config = SimConfig(**kwargs)  # type: ignore[arg-type]
    return Engine(config, SimMetrics(Registry(), config.model))


def _spec(prompt_len: int, out_len: int, index: int = 0, offset: int = 0) -> SeqSpec:
    prompt = [offset + i for i in range(prompt_len)]
    return SeqSpec(prompt, [f" w{i}" for i in range(out_len)], "length", None, index)


async def _times(queue: asyncio.Queue[SeqEvent], count: int) -> list[float]:
    loop = asyncio.get_running_loop()
    stamps = []
    for _ in range(count):
        await asyncio.wait_for(queue.get(), 5)
        stamps.append(loop.time())
    return stamps


async def test_ttft_follows_prefill_and_itl_follows_decode_step() -> None:
    engine = _engine(prefill_ms_per_token=0.5, decode_ms_per_step=15.0, decode_batch_factor=0)
    await engine.start()
    try:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        start = loop.time()
        engine.submit([_spec(200, 8)], queue)
        stamps = await _times(queue, 8)
        ttft = stamps[0] - start
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        assert 0.095 <= ttft < 0.2  # 200 tokens x 0.5 ms
        assert 0.014 <= statistics.median(gaps) < 0.035

        # Same prompt again: 12 of its 12.5 blocks are cached, prefill is ~8 tokens.
        start = loop.time()
        seqs = engine.submit([_spec(200, 2)], queue)
        stamps = await _times(queue, 2)
        assert stamps[0] - start < 0.06
        assert seqs[0].cached_tokens == 192
    finally:
        await engine.aclose()


async def test_batch_factor_slows_decode_steps() -> None:
    engine = _engine(decode_ms_per_step=10.0, decode_batch_factor=1.0)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_spec(4, 6, i, offset=100 * i) for i in range(3)], queue)
        stamps = await _times(queue, 18)
        # 3 decoding requests: each step takes 10 ms * (1 + 2) = 30 ms.
        span = stamps[-1] - stamps[0]
        assert span >= 0.13  # 5 decode steps after the first tokens
    finally:
        await engine.aclose()


async def test_max_num_seqs_keeps_the_rest_waiting_fcfs() -> None:
    engine = _engine(decode_ms_per_step=5.0, max_num_seqs=2)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_spec(4, 5, i, offset=100 * i) for i in range(4)], queue)
        await asyncio.sleep(0.012)
        assert len(engine.running) == 2 and len(engine.waiting) == 2
        order = []
        for _ in range(20):
            ev = await asyncio.wait_for(queue.get(), 5)
            if ev.finish_reason:
                order.append(ev.index)
        assert order[:2] == [0, 1] and sorted(order[2:]) == [2, 3]
        assert not engine.running and not engine.waiting and engine.kv.usage == 0.0
    finally:
        await engine.aclose()


async def test_preemption_when_kv_runs_out_and_everyone_still_finishes() -> None:
    # 6 blocks of 4 tokens; two requests that each grow to 5 blocks cannot both fit.
    engine = _engine(decode_ms_per_step=1.0, kv_blocks=6, block_size=4)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_spec(4, 14, 0), _spec(4, 14, 1, offset=50)], queue)
        texts: dict[int, list[str]] = {0: [], 1: []}
        finished = 0
        while finished < 2:
            ev = await asyncio.wait_for(queue.get(), 5)
            texts[ev.index].append(ev.text)
            finished += ev.finish_reason is not None
        assert engine.metrics.preemptions.labels("tiny").value >= 1
        assert texts[0] == texts[1] == [f" w{i}" for i in range(14)]
        assert engine.kv.usage == 0.0
    finally:
        await engine.aclose()


async def test_abort_frees_kv_and_stops_decoding() -> None:
    engine = _engine(decode_ms_per_step=5.0)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        (seq,) = engine.submit([_spec(40, 1000)], queue)
        await _times(queue, 2)
        assert engine.kv.usage > 0 and len(engine.running) == 1
        assert engine.abort(seq)
        assert engine.kv.usage == 0.0 and not engine.running
        await asyncio.sleep(0.03)
        produced = queue.qsize()
        await asyncio.sleep(0.03)
        assert queue.qsize() == produced <= 1
    finally:
        await engine.aclose()


async def test_instant_mode_answers_at_once_and_still_counts_prefix_hits() -> None:
    engine = _engine()
    queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
    engine.submit([_spec(64, 3)], queue)
    assert queue.qsize() == 3
    (seq,) = engine.submit([_spec(64, 3)], queue)
    assert seq.cached_tokens == 48
    assert engine.metrics.prefix_hits.labels("tiny").value == 48
    await engine.aclose()


def _prio(index: int, priority: int, out_len: int = 10) -> SeqSpec:
    prompt = [1000 * (index + 1) + i for i in range(4)]
    words = [f" w{i}" for i in range(out_len)]
    return SeqSpec(prompt, words, "length", None, index, priority)


async def test_priority_policy_admits_the_more_important_first_without_preempting() -> None:
    # vLLM v1: the waiting queue is ordered by priority, but a batch full by count is not
    # preempted for a more important request: it starts when a slot frees, before the rest.
    engine = _engine(decode_ms_per_step=5.0, max_num_seqs=2, scheduling_policy="priority")
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_prio(0, 5, 30), _prio(1, 5, 30), _prio(2, 5, 30)], queue)  # 2 run
        await asyncio.sleep(0.012)
        engine.submit([_prio(3, 0, 5), _prio(4, 9, 5)], queue)
        sizes = {0: 30, 1: 30, 2: 30, 3: 5, 4: 5}
        texts: dict[int, list[str]] = {i: [] for i in range(5)}
        order: list[int] = []
        started: list[int] = []
        while len(order) < 5:
            ev = await asyncio.wait_for(queue.get(), 5)
            if not texts[ev.index]:
                started.append(ev.index)
            texts[ev.index].append(ev.text)
            if ev.finish_reason:
                order.append(ev.index)
        assert started[:2] == [0, 1] and order[:2] == [0, 1]  # nobody running was preempted
        assert started[2:] == [3, 2, 4]  # then by priority, not by arrival
        assert engine.metrics.preemptions.labels("tiny").value == 0
        assert all(t == [f" w{i}" for i in range(sizes[k])] for k, t in texts.items())
    finally:
        await engine.aclose()


async def test_preempt_for_priority_runs_the_more_important_at_once() -> None:
    # vLLM V0's priority policy: a full batch makes room for a more important request.
    engine = _engine(
        decode_ms_per_step=5.0,
        max_num_seqs=2,
        scheduling_policy="priority",
        preempt_for_priority=True,
    )
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_prio(0, 5, 30), _prio(1, 5, 30)], queue)
        await asyncio.sleep(0.012)
        engine.submit([_prio(2, 0, 5), _prio(3, 9, 5)], queue)
        order: list[int] = []
        while len(order) < 4:
            ev = await asyncio.wait_for(queue.get(), 5)
            if ev.finish_reason:
                order.append(ev.index)
        assert order[0] == 2 and order[-1] == 3  # ran at once; the least important last
        assert engine.metrics.preemptions.labels("tiny").value >= 1
    finally:
        await engine.aclose()


async def _kv_victim(policy: str) -> tuple[int, int]:
    """Two requests that cannot both grow to the end (6 blocks of 4 tokens): the older one
    unimportant (priority 9), the newer important (0). Their preemption counts."""
    engine = _engine(decode_ms_per_step=1.0, kv_blocks=6, block_size=4, scheduling_policy=policy)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        old = engine.submit([_prio(0, 9 if policy == "priority" else 0, 14)], queue)[0]
        new = engine.submit([_prio(1, 0, 14)], queue)[0]
        finished = 0
        while finished < 2:
            ev = await asyncio.wait_for(queue.get(), 5)
            finished += ev.finish_reason is not None
        return old.preemptions, new.preemptions
    finally:
        await engine.aclose()


async def test_kv_pressure_preempts_the_least_important_under_priority() -> None:
    old, new = await _kv_victim("priority")
    assert old >= 1 and new == 0
    old, new = await _kv_victim("fcfs")  # fcfs: the most recently admitted gives way
    assert new >= 1 and old == 0


async def test_fcfs_ignores_priority_order() -> None:
    engine = _engine(decode_ms_per_step=5.0, max_num_seqs=1)
    await engine.start()
    try:
        queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
        engine.submit([_prio(0, 5, 4), _prio(1, 5, 4), _prio(2, 0, 4)], queue)
        order = []
        while len(order) < 3:
            ev = await asyncio.wait_for(queue.get(), 5)
            if ev.finish_reason:
                order.append(ev.index)
        assert order == [0, 1, 2]
    finally:
        await engine.aclose()
