"""The image compute budget shared through a real Redis by several gateway processes."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.multimodal.images.turns import admission_order
from tests.procs import metric_value

from fleetgate.multimodal.images.shared_budget import SharedImageBudget
from fleetgate.resources import RedisConnections

pytestmark = pytest.mark.redis

REDIS_URL = "redis://127.0.0.1:6379/0"

BudgetFactory = Callable[..., SharedImageBudget]


@pytest.fixture
def prefix() -> str:
    return f"test:{uuid.uuid4().hex}:"


@pytest.fixture
async def process(prefix: str) -> AsyncIterator[BudgetFactory]:
    """Makes one "gateway process": its own Redis connections and its own budget."""
    owners: list[RedisConnections] = []
    budgets: list[SharedImageBudget] = []

    def make(url: str = REDIS_URL, **opts: Any) -> SharedImageBudget:
        owner = RedisConnections()
        owners.append(owner)
        opts.setdefault("default_tokens_in_flight", 1000)
        budget = SharedImageBudget(owner.client(url), prefix=prefix, **opts)
        budgets.append(budget)
        return budget

    yield make
    for budget in budgets:
        await budget.aclose()
    for owner in owners:
        await owner.aclose()


async def _pending(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0.15)
    return task


async def test_two_processes_together_never_exceed_the_budget(process: BudgetFactory) -> None:
    a, b = process(), process()
    held = peak = 0

    async def request(budget: SharedImageBudget, tokens: int) -> None:
        nonlocal held, peak
        async with budget.admit("dep", tokens):
            held += tokens
            peak = max(peak, held)
            assert await a.held("dep") <= 1000
            await asyncio.sleep(0.02)
            held -= tokens

    sizes = [300, 400, 500, 200, 600] * 4
    await asyncio.wait_for(
        asyncio.gather(*(request(a if i % 2 else b, n) for i, n in enumerate(sizes))), 20
    )
    assert peak <= 1000
    assert peak > 600  # requests did run side by side
    assert await a.held("dep") == 0 and a.in_flight("dep") == b.in_flight("dep") == 0


async def test_a_waiting_request_gets_in_when_the_other_process_releases(
    process: BudgetFactory,
) -> None:
    a, b = process(), process()
    async with a.admit("dep", 800):
        assert await b.held("dep") == 800
        second = b.admit("dep", 500)
        waiter = await _pending(second.__aenter__())
        assert not waiter.done()
        assert b.waiting("dep") == 1
    await asyncio.wait_for(waiter, 2)
    assert b.in_flight("dep") == 500 and await a.held("dep") == 500
    await second.__aexit__(None, None, None)
    assert await a.held("dep") == 0
    async with b.admit("other", 1000):  # deployments are independent
        assert await a.held("other") == 1000


async def test_oversized_request_runs_alone(process: BudgetFactory) -> None:
    a, b = process(), process()
    async with a.admit("dep", 5000):
        assert await b.held("dep") == 1000  # counted as the whole budget
        admit_small = b.admit("dep", 10)
        small = await _pending(admit_small.__aenter__())
        assert not small.done()
    await asyncio.wait_for(small, 2)
    big = await _pending(a.admit("dep", 5000).__aenter__())
    assert not big.done()  # not while anything else is held
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    assert a.waiting("dep") == 0
    await admit_small.__aexit__(None, None, None)
    await a.aclose()  # the cut-off grant's clean-up has run
    assert await a.held("dep") == 0


_HOLDER = """
import asyncio, sys
from fleetgate.multimodal.images.shared_budget import SharedImageBudget
from fleetgate.resources import RedisConnections

async def main() -> None:
    client = RedisConnections().client(sys.argv[1])
    budget = SharedImageBudget(
        client, default_tokens_in_flight=1000, prefix=sys.argv[2], lease_s=0.5
    )
    async with budget.admit("dep", 1000):
        print("held", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_a_crashed_process_frees_its_tokens_when_its_lease_expires(
    process: BudgetFactory, prefix: str
) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, REDIS_URL, prefix, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), 30) == b"held\n"
        b = process()
        # The holder renews its 0.5 s lease: still held well past one lease length.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.5):
                async with b.admit("dep", 100):
                    pass
        assert await b.held("dep") == 1000
        holder.send_signal(signal.SIGKILL)  # no release, no more renewals
        await holder.wait()
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        async with asyncio.timeout(3):
            async with b.admit("dep", 100):
                assert await b.held("dep") == 100
        assert loop.time() - killed_at < 1.5
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


async def test_redis_down_falls_back_to_the_process_budget(process: BudgetFactory) -> None:
    outages: list[int] = []
    down = process("redis://127.0.0.1:1/0", on_unavailable=lambda: outages.append(1))
    async with asyncio.timeout(5):
        async with down.admit("dep", 600):
            assert down.in_flight("dep") == 600
            assert outages
            # Still a budget: the process's own one.
            second = down.admit("dep", 600)
            waiter = await _pending(second.__aenter__())
            assert not waiter.done() and down.waiting("dep") == 1
        await waiter
        assert down.in_flight("dep") == 600
        await second.__aexit__(None, None, None)
    assert down.in_flight("dep") == 0


def _chat(url: str) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return {"model": "tiny", "messages": [{"role": "user", "content": parts}]}


async def test_gateway_with_redis_shares_the_budget_with_other_processes(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    image_server: tuple[str, list[str]],
    process: BudgetFactory,
    prefix: str,
) -> None:
    base, _ = image_server
    cfg = one_alias(upstream)
    cfg["multimodal"] = {
        "images": {
            "fetch": {"allow_http": True, "allow_cidrs": ["127.0.0.0/8"]},
            "budget": {"tokens_in_flight": 1000, "queue_timeout_s": 0.3},
        }
    }
    cfg["tenancy"] = {"enabled": False, "redis_prefix": prefix}
    client = await gateway(cfg, redis_url=REDIS_URL)
    other = process()  # another replica, holding deployment "a"'s whole budget
    async with other.admit(upstream.name, 1000):
        busy = await client.post(
            "/v1/chat/completions", json=_chat(base + "/img.png"), headers=AUTH
        )
        assert busy.status == 429
        assert (await busy.json())["error"]["code"] == "image_budget_busy"
    ok = await client.post("/v1/chat/completions", json=_chat(base + "/img.png"), headers=AUTH)
    assert ok.status == 200, await ok.text()
    assert await other.held(upstream.name) == 0  # released after the upstream answered
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "fleetgate_image_budget_fallbacks_total") == 0


async def test_waiting_requests_of_different_keys_take_turns(process: BudgetFactory) -> None:
    budget = process(default_tokens_in_flight=100)
    admitted = await admission_order(budget, timeout_s=10, poll_s=0.005)
    # b waited for a's request at the head and one turn more, not for all of a's backlog.
    assert admitted == ["a1", "a2", "a3", "b1", "a4"]
