"""The scenario the image budgets' fairness tests share: one key's backlog and another key's
single request, all waiting for the same deployment's budget."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fleetgate.multimodal.images.budget import ImageBudget


async def admission_order(budget: ImageBudget, *, timeout_s: float, poll_s: float) -> list[str]:
    """The order in which ``budget`` (100 tokens in flight on "dep") admits key a's four
    requests, sent first, and key b's one, sent once a's are in: each takes the whole budget
    and holds it until it is the newest admitted. Each wait gives up after ``timeout_s``."""
    admitted: list[str] = []
    done: dict[str, asyncio.Event] = {}

    async def request(owner: str, name: str) -> None:
        done[name] = asyncio.Event()
        async with budget.admit("dep", 100, owner=owner):
            admitted.append(name)
            await done[name].wait()

    async def until(condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(poll_s)

    tasks = []
    for n in range(1, 5):  # key a: one request holding the whole budget, three waiting
        tasks.append(asyncio.create_task(request("key-a", f"a{n}")))
        await until(lambda n=n: len(admitted) + budget.waiting("dep") == n)  # type: ignore[misc]
    tasks.append(asyncio.create_task(request("key-b", "b1")))
    await until(lambda: budget.waiting("dep") == 4)
    for n in range(1, 6):  # each ends once it is admitted, letting the next one in
        await until(lambda n=n: len(admitted) == n)  # type: ignore[misc]
        done[admitted[-1]].set()
    await asyncio.gather(*tasks)
    return admitted
