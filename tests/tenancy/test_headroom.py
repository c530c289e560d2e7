"""`Headroom`: when a reservation may overlap the upstream call (and when it must not)."""

from __future__ import annotations

from fleetgate.limits.base import Reservation, Scope, ScopeUsage
from fleetgate.tenancy.headroom import Headroom


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _granted(scopes: tuple[Scope, ...], *left: tuple[int | None, int | None]) -> Reservation:
    usage = [ScopeUsage(r, t, 0, 0) for r, t in left]
    return Reservation("m", scopes, 10, True, usage)


def test_only_a_fresh_grant_with_room_to_spare_allows_it() -> None:
    clock = Clock()
    room = Headroom(lambda s: None, clock=clock)
    scopes = (Scope("key:a", rpm=10, tpm=1000), Scope("team:t", rpm=100))
    assert not room.allows(scopes, 10)  # nothing known yet: the serial way
    room.granted(scopes, _granted(scopes, (5, 500), (50, None)))
    assert room.allows(scopes, 10)
    assert not room.allows(scopes, 300)  # 500 tokens left: not twice this request's 300
    clock.now += 6
    assert not room.allows(scopes, 10)  # stale
    room.granted(scopes, _granted(scopes, (1, 500), (50, None)))
    assert not room.allows(scopes, 10)  # one request left: another replica may take it


def test_reservations_in_flight_count_against_the_room() -> None:
    room = Headroom(lambda s: None)
    scopes = (Scope("key:a", rpm=10),)
    room.granted(scopes, _granted(scopes, (2, None)))
    assert room.allows(scopes, 1)
    room.sent(scopes, 1)
    assert not room.allows(scopes, 1)  # 2 left - 1 unanswered < 2
    room.answered(scopes, 1)
    assert room.allows(scopes, 1)


def test_a_refusal_sends_the_next_ones_the_serial_way() -> None:
    room = Headroom(lambda s: None)
    scopes = (Scope("key:a", rpm=10),)
    room.granted(scopes, _granted(scopes, (8, None)))
    room.sent(scopes, 1)
    room.refused(scopes)
    assert not room.allows(scopes, 1)
    room.answered(scopes, 1)
    room.granted(scopes, _granted(scopes, (8, None)))
    assert room.allows(scopes, 1)


def test_parallel_slots_at_most_half_taken_by_this_process() -> None:
    room = Headroom(lambda s: None)
    one = (Scope("key:one", max_parallel=1),)
    room.granted(one, _granted(one, (None, None)))
    room.released(one)
    assert not room.allows(one, 1)  # a one-slot key never overlaps
    four = (Scope("key:four", max_parallel=4),)
    room.granted(four, _granted(four, (None, None)))  # one slot held
    assert room.allows(four, 1)  # 1 held + this one = 2 of 4
    room.granted(four, _granted(four, (None, None)))
    assert not room.allows(four, 1)  # 3 of 4
    room.released(four)
    room.released(four)
    assert room.allows(four, 1)


def test_a_budget_must_be_known_and_under_90_percent() -> None:
    spent: dict[str, int] = {}
    room = Headroom(lambda s: spent.get(s.name))
    scopes = (Scope("team:t", budget_nusd=1000),)
    room.granted(scopes, _granted(scopes, (None, None)))
    assert not room.allows(scopes, 1)  # unknown spend
    spent["team:t"] = 899
    assert room.allows(scopes, 1)
    spent["team:t"] = 900
    assert not room.allows(scopes, 1)


def test_a_grant_not_enforced_says_nothing_of_the_room() -> None:
    """Redis away under ``fail_open``: the grant carries no counts, so the next request after
    the outage goes the serial way (its slots are still held and released)."""
    room = Headroom(lambda s: None)
    scopes = (Scope("key:a", rpm=10, max_parallel=8),)
    room.granted(scopes, _granted(scopes, (8, None)))
    assert room.allows(scopes, 1)
    room.granted(scopes, Reservation("m", scopes, 1, enforced=False))
    assert not room.allows(scopes, 1)
    room.released(scopes)
    room.released(scopes)
    room.granted(scopes, _granted(scopes, (7, None)))
    assert room.allows(scopes, 1)


def test_a_grant_nobody_enforced_tells_nothing_of_the_room() -> None:
    """Redis away under ``fail_open`` admits without counting (no usage): that grant must not
    open the overlap for a key that may be at its limit once Redis is back."""
    room = Headroom(lambda s: None)
    scopes = (Scope("key:a", rpm=2, tpm=1000),)
    room.granted(scopes, Reservation("m", scopes, 10, enforced=False))
    assert not room.allows(scopes, 1)
