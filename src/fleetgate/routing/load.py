"""Local tracking of every request this gateway sent: dispatch, first token, completion.

Engine metrics arrive every scrape interval; between two scrapes the router would be blind to
what it just sent. `LoadTracker` closes that gap: the dispatcher reports each attempt, and the
tracker keeps, per deployment, how many requests are still before their first token (with their
predicted uncached prompt tokens, the prefill work they queue up) and how many are decoding.

Example::

    tracker = LoadTracker()
    ticket = tracker.dispatched("dep-key", prefill_tokens=1800)
    tracker.first_token(ticket)      # moves it from prefill to decode
    tracker.finished(ticket)         # gone; calling it twice is harmless
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LocalLoad", "LoadTracker", "Ticket"]


@dataclass(slots=True)
class LocalLoad:
    """Requests one gateway replica has in flight on one deployment."""

    prefilling: int = 0
    prefill_tokens: int = 0
    decoding: int = 0

    def add(self, other: LocalLoad) -> LocalLoad:
        return LocalLoad(
            self.prefilling + other.prefilling,
            self.prefill_tokens + other.prefill_tokens,
            self.decoding + other.decoding,
        )

    @property
    def total(self) -> int:
        return self.prefilling + self.decoding


@dataclass(slots=True)
class Ticket:
    """One attempt on one deployment, as the tracker knows it."""

    key: str
    prefill_tokens: int
    stage: int = 0  # 0 before the first token, 1 decoding, 2 finished


@dataclass(slots=True)
class LoadTracker:
    """Per-deployment counts, keyed by `fleetgate.routing.deployment.deployment_key`."""

    _loads: dict[str, LocalLoad] = field(default_factory=dict)

    def dispatched(self, key: str, prefill_tokens: int) -> Ticket:
        """An attempt was sent to ``key``; ``prefill_tokens`` is its predicted uncached work."""
        load = self._loads.setdefault(key, LocalLoad())
        tokens = max(0, prefill_tokens)
        load.prefilling += 1
        load.prefill_tokens += tokens
        return Ticket(key, tokens)

    def first_token(self, ticket: Ticket) -> None:
        """The attempt produced its first token (its prefill is done)."""
        if ticket.stage != 0:
            return
        load = self._loads.get(ticket.key)
        ticket.stage = 1
        if load is not None:
            load.prefilling -= 1
            load.prefill_tokens -= ticket.prefill_tokens
            load.decoding += 1

    def finished(self, ticket: Ticket) -> None:
        """The attempt ended (answered, failed or cancelled)."""
        if ticket.stage == 2:
            return
        load = self._loads.get(ticket.key)
        if load is not None:
            if ticket.stage == 0:
                load.prefilling -= 1
                load.prefill_tokens -= ticket.prefill_tokens
            else:
                load.decoding -= 1
            if load.total <= 0:
                del self._loads[ticket.key]
        ticket.stage = 2

    def load(self, key: str) -> LocalLoad:
        """A copy of the current counts for ``key`` (zeros when idle)."""
        load = self._loads.get(key)
        return LocalLoad() if load is None else LocalLoad(*_fields(load))

    def loads(self) -> dict[str, LocalLoad]:
        """A copy of every non-idle deployment's counts."""
        return {k: LocalLoad(*_fields(v)) for k, v in self._loads.items()}


def _fields(load: LocalLoad) -> tuple[int, int, int]:
    return load.prefilling, load.prefill_tokens, load.decoding
