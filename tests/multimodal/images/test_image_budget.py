import asyncio

import pytest
from tests.multimodal.images.turns import admission_order

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.budget import ImageComputeBudget


async def test_admission_is_fifo_and_text_only_never_waits() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=1000)
    order: list[str] = []
    release = asyncio.Event()

    async def request(name: str, tokens: int, hold: bool = False) -> None:
        async with budget.admit("dep", tokens):
            order.append(name)
            if hold:
                await release.wait()

    first = asyncio.create_task(request("first-800", 800, hold=True))
    await asyncio.sleep(0)
    big = asyncio.create_task(request("big-900", 900))
    await asyncio.sleep(0)
    small = asyncio.create_task(request("small-100", 100))  # would fit, but must not overtake
    await asyncio.sleep(0)
    await asyncio.wait_for(request("text", 0), 1)  # text-only goes straight through
    assert order == ["first-800", "text"]
    assert budget.waiting("dep") == 2 and budget.in_flight("dep") == 800
    release.set()
    await asyncio.wait_for(asyncio.gather(first, big, small), 1)
    assert order == ["first-800", "text", "big-900", "small-100"]
    assert budget.in_flight("dep") == 0


async def test_oversized_request_runs_alone_and_deployments_are_independent() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=100, per_deployment={"b": 50})
    async with budget.admit("a", 5000):
        assert budget.in_flight("a") == 100
        async with budget.admit("b", 50):
            assert budget.in_flight("b") == 50


async def test_cancelled_waiter_leaves_the_queue() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=100)
    async with budget.admit("d", 100):
        waiter = asyncio.create_task(budget.admit("d", 50).__aenter__())
        await asyncio.sleep(0)
        assert budget.waiting("d") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert budget.waiting("d") == 0
    async with budget.admit("d", 100):
        assert budget.in_flight("d") == 100


def test_per_request_image_cap() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=100, max_images_per_request=5)
    budget.check_request(5)
    with pytest.raises(InvalidRequest, match="6 images; at most 5") as info:
        budget.check_request(6)
    assert info.value.status == 400


async def test_one_key_s_backlog_of_image_requests_does_not_hold_up_another_key() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=100)
    admitted = await admission_order(budget, timeout_s=5, poll_s=0)
    # b waited for a's request at the head and one turn more, not for all of a's backlog.
    assert admitted == ["a1", "a2", "a3", "b1", "a4"]
