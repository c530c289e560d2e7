"""`Disclosures`: each alias's registered model name and filing number as the config says now.

One object per gateway, kept by the disclosure feature and swapped to a reloaded section in
place, so whoever holds it (the feature's stage and ``GET /disclosure``, the console through
the `DISCLOSURE` port) reads the current names at each use::

    model, number = disclosures.of("chat-zh")
    rows = disclosures.rows()   # every alias with a name or a number, in config order
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleetgate.disclosure.config import DisclosureConfig

__all__ = ["Disclosure", "Disclosures"]


@dataclass(frozen=True, slots=True)
class Disclosure:
    """What an alias's answers disclose (either may be None: not disclosed)."""

    alias: str
    model_name: str | None
    filing_number: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"alias": self.alias, "model_name": self.model_name,
                "filing_number": self.filing_number}  # fmt: skip


class Disclosures:
    def __init__(self, config: DisclosureConfig, aliases: Iterable[str]) -> None:
        self.config = config
        self.aliases = list(aliases)

    def update(self, config: DisclosureConfig, aliases: Iterable[str]) -> None:
        """A reloaded section (an empty one when the section was removed: nothing shown)."""
        self.config = config
        self.aliases = list(aliases)

    def of(self, alias: str) -> tuple[str | None, str | None]:
        """(registered model name, filing number) of ``alias``."""
        return self.config.of(alias)

    def get(self, alias: str) -> Disclosure | None:
        """What ``alias`` discloses; None when it discloses nothing."""
        model, number = self.config.of(alias)
        return Disclosure(alias, model, number) if model or number else None

    def rows(self) -> list[Disclosure]:
        """Every alias that discloses something, in the config's order."""
        return [d for d in map(self.get, self.aliases) if d is not None]
