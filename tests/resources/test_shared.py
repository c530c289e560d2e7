"""`SharedStates`: followers get a kind's bodies at once and after every change made by any
process on the same database; a database away at start is caught up with, and readiness can
tell until then."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fleetgate.app import MIGRATIONS
from fleetgate.resources import Databases
from fleetgate.resources.shared import SharedStates


async def _replica() -> tuple[Databases, SharedStates]:
    dbs = Databases(MIGRATIONS)
    return dbs, SharedStates(dbs, poll_interval_s=0.05)


async def _until(check: Any, timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.02)


async def test_a_change_on_one_replica_reaches_the_followers_of_another(
    db_url: str, tmp_path: Path
) -> None:
    dbs_a, shared_a = await _replica()
    dbs_b, shared_b = await _replica()
    try:
        state_a = shared_a.state(dbs_a.get(db_url, tmp_path), "test_kind")
        state_b = shared_b.state(dbs_b.get(db_url, tmp_path), "test_kind")
        got: list[dict[str, Any]] = []
        await shared_b.follow(state_b, got.append)
        assert got == [{}] and shared_b.loaded(state_b)

        await state_a.put("one", {"n": 1})
        await _until(lambda: got[-1] == {"one": {"n": 1}})
        await state_a.delete("one")
        await _until(lambda: got[-1] == {})
        calls = len(got)
        await asyncio.sleep(0.2)  # nothing changed: nobody is called again
        assert len(got) == calls
    finally:
        await shared_a.aclose()
        await shared_b.aclose()
        await dbs_a.aclose()
        await dbs_b.aclose()


async def test_a_database_away_at_start_is_caught_up_with_and_reported_until_then(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "fleetgate.db"
    blocked.mkdir()  # a folder where the database file should be: it cannot be opened
    url = f"sqlite:///{blocked}"
    dbs, shared = await _replica()
    try:
        state = shared.state(dbs.get(url, tmp_path), "test_kind")
        got: list[dict[str, Any]] = []
        await shared.follow(state, got.append)  # nothing loads
        assert got == [] and not shared.loaded(state)
        await asyncio.sleep(0.2)  # the poller keeps failing quietly
        assert not shared.loaded(state) and shared.failures > 0

        blocked.rmdir()
        await _until(lambda: shared.loaded(state))
        assert got == [{}]
        await state.put("one", {"n": 1})
        await _until(lambda: got[-1] == {"one": {"n": 1}})
    finally:
        await shared.aclose()
        await dbs.aclose()


async def test_one_failing_follower_does_not_stop_the_others(db_url: str, tmp_path: Path) -> None:
    dbs, shared = await _replica()
    try:
        state = shared.state(dbs.get(db_url, tmp_path), "test_kind")

        def broken(_bodies: dict[str, Any]) -> None:
            raise RuntimeError("a follower's bug")

        got: list[dict[str, Any]] = []
        await shared.follow(state, broken)
        await shared.follow(state, got.append)
        await state.put("x", [1, 2])
        await _until(lambda: bool(got) and got[-1] == {"x": [1, 2]})
    finally:
        await shared.aclose()
        await dbs.aclose()


async def test_a_poll_that_read_across_this_process_s_write_does_not_undo_it(
    db_url: str, tmp_path: Path
) -> None:
    """A poll that read the bodies, then saw this process's own write land before handing them
    on, would give followers the state from before the write for a poll interval (an admin
    change answered 200, then undone until the next poll). Such a snapshot is dropped; the next
    poll hands on the new state."""
    dbs, shared = await _replica()
    await shared.aclose()  # no background poller: this test polls by hand
    try:
        state = shared.state(dbs.get(db_url, tmp_path), "test_kind_stale")
        got: list[dict[str, Any]] = []
        await shared.follow(state, got.append)
        await shared.aclose()
        await state.put("old", {"n": 0})
        await shared.refresh()
        assert got[-1] == {"old": {"n": 0}}

        real_load = state.load

        async def load_then_write_lands() -> tuple[int, dict[str, Any]]:
            snapshot = await real_load()
            await state.put("new", {"n": 1})  # this process's write lands after the read
            return snapshot

        state.load = load_then_write_lands  # type: ignore[method-assign]
        await state.put("old", {"n": 2})  # a version the followers have not seen
        await shared.refresh()
        assert got[-1] == {"old": {"n": 0}}  # the stale snapshot was not handed on
        state.load = real_load  # type: ignore[method-assign]
        await shared.refresh()
        assert got[-1] == {"old": {"n": 2}, "new": {"n": 1}}
        assert state.stale(state.written - 1) and not state.stale(state.written)
    finally:
        await shared.aclose()
        await dbs.aclose()
