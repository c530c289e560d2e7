"""Supervised native workers: a crash, a kill or a hang costs one call, never the caller's
process, and the next call is served by a fresh worker."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest

from fleetgate.errors import InvalidRequest, MissingExtra, ServiceUnavailable
from fleetgate.multimodal.native.pool import NativeWorkerPool, WorkerSpec

SPEC = WorkerSpec("tests.multimodal.native.handlers:Handler", name="test")


@pytest.fixture
async def pool() -> AsyncIterator[NativeWorkerPool]:
    failures: list[tuple[str, str]] = []
    workers = NativeWorkerPool(
        SPEC, size=1, call_timeout_s=20, on_failure=lambda n, r: failures.append((n, r))
    )
    workers.failures = failures  # type: ignore[attr-defined]
    yield workers
    await workers.aclose()


async def _wait_busy(pool: NativeWorkerPool) -> None:
    for _ in range(500):
        if pool.in_flight:
            await asyncio.sleep(0.2)  # the call is in the worker by now
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the call never started")


async def test_a_worker_killed_mid_call_fails_that_call_with_503_and_the_next_call_works(
    pool: NativeWorkerPool,
) -> None:
    first = await pool.call("pid")
    call = asyncio.create_task(pool.call("sleep", 30.0))
    await _wait_busy(pool)
    os.kill(first, signal.SIGKILL)
    with pytest.raises(ServiceUnavailable) as info:
        await asyncio.wait_for(call, 10)
    assert info.value.status == 503 and info.value.code == "native_worker_crashed"
    assert "signal 9" in info.value.message
    second = await pool.call("pid")
    assert second != first and pool.pids() == [second]
    assert pool.failures == [("test", "crashed")]  # type: ignore[attr-defined]


async def test_a_segfault_in_native_code_costs_one_call(pool: NativeWorkerPool) -> None:
    first = await pool.call("pid")
    with pytest.raises(ServiceUnavailable) as info:
        await pool.call("segfault")
    assert info.value.code == "native_worker_crashed"
    assert f"signal {int(signal.SIGSEGV)}" in info.value.message
    assert await pool.call("pid") != first


async def test_a_call_past_its_time_limit_kills_the_worker(pool: NativeWorkerPool) -> None:
    first = await pool.call("pid")
    with pytest.raises(ServiceUnavailable) as info:
        await pool.call("sleep", 30.0, timeout_s=0.5)
    assert info.value.code == "native_worker_timeout"
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # killed and reaped
    assert await pool.call("sleep", 0.01) == "slept"


async def test_errors_raised_in_the_worker_keep_the_worker(pool: NativeWorkerPool) -> None:
    first = await pool.call("pid")
    with pytest.raises(InvalidRequest) as refused:
        await pool.call("refuse")
    assert (refused.value.param, refused.value.code) == ("file", "nope")
    with pytest.raises(ServiceUnavailable) as bug:
        await pool.call("bug")
    assert bug.value.code == "native_worker_error" and "KeyError" in bug.value.message
    assert await pool.call("pid") == first
    assert pool.failures == []  # type: ignore[attr-defined]


async def test_a_worker_sends_data_never_code(pool: NativeWorkerPool) -> None:
    data = os.urandom(3 * 1024 * 1024)
    assert await pool.call("echo", data) == data
    with pytest.raises(ServiceUnavailable):
        await pool.call("global_reference")  # refused on the gateway's side of the socket


async def test_a_cancelled_caller_leaves_the_worker_to_finish_and_be_reused(
    pool: NativeWorkerPool,
) -> None:
    first = await pool.call("pid")
    call = asyncio.create_task(pool.call("sleep", 0.5))
    await _wait_busy(pool)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await pool.call("pid") == first
    assert await pool.call("count") == 2  # the same handler, initialised once


async def test_a_handler_that_cannot_start_is_a_503_per_call() -> None:
    spec = WorkerSpec(SPEC.factory, {"fail_start": True}, name="broken")
    pool = NativeWorkerPool(spec, start_timeout_s=20)
    try:
        for _ in range(2):
            with pytest.raises(ServiceUnavailable) as info:
                await pool.call("pid")
            assert info.value.code == "native_worker_start"
            assert "no model files here" in info.value.message
    finally:
        await pool.aclose()


async def test_a_missing_extra_in_the_worker_is_named_to_the_caller() -> None:
    spec = WorkerSpec(SPEC.factory, {"needs": "no_such_package_fleetgate"}, name="extra")
    pool = NativeWorkerPool(spec, start_timeout_s=20)
    try:
        with pytest.raises(MissingExtra) as info:
            await pool.call("pid")
        assert info.value.extra == "audio" and info.value.code == "missing_extra"
        assert "pip install 'fleetgate[audio]'" in info.value.message
    finally:
        await pool.aclose()


async def test_close_stops_the_workers_and_later_calls_are_refused() -> None:
    pool = NativeWorkerPool(SPEC, size=2)
    await asyncio.to_thread(pool.warm_up)
    pids = pool.pids()
    assert len(pids) == 2
    await pool.aclose()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(ServiceUnavailable):
        await pool.call("pid")


async def test_a_worker_that_died_while_idle_is_replaced_before_the_next_call(
    pool: NativeWorkerPool,
) -> None:
    first = await pool.call("pid")
    os.kill(first, signal.SIGKILL)
    while first in pool.pids():
        await asyncio.sleep(0.01)
    assert await pool.call("pid") != first
    assert pool.failures == [("test", "crashed")]  # type: ignore[attr-defined]
