"""Length distributions for synthetic prompts and outputs: ``fixed:N``, ``uniform:A-B``,
``normal:MEAN,STD``.

Example::

    dist = parse_length_dist("normal:512,64")
    dist.sample(rng, 1000)   # 1000 ints >= 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fleetgate.errors import InvalidRequest

__all__ = ["LengthDist", "parse_length_dist"]


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts; every sample is clipped to at least ``minimum``."""

    kind: Literal["fixed", "uniform", "normal"]
    a: float
    b: float = 0.0
    minimum: int = 1

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        """Draw ``n`` lengths."""
        if self.kind == "fixed":
            values = np.full(n, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, size=n)
        else:
            values = np.rint(rng.normal(self.a, self.b, size=n))
        return [max(self.minimum, int(v)) for v in values]

    @property
    def mean(self) -> float:
        """Expected value before clipping."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a


def parse_length_dist(text: str) -> LengthDist:
    """Parse ``"512"``, ``"fixed:512"``, ``"uniform:100-1000"`` or ``"normal:512,64"``."""
    kind, _, rest = text.partition(":")
    if not rest:
        kind, rest = "fixed", kind
    try:
        if kind == "fixed":
            return LengthDist("fixed", float(int(rest)))
        if kind == "uniform":
            lo, hi = (int(x) for x in rest.replace(",", "-").split("-"))
            if lo > hi or lo < 1:
                raise ValueError
            return LengthDist("uniform", float(lo), float(hi))
        if kind == "normal":
            mean, std = (float(x) for x in rest.split(","))
            if std < 0 or mean < 1:
                raise ValueError
            return LengthDist("normal", mean, std)
    except ValueError:
        pass
    raise InvalidRequest(
        f"bad length distribution {text!r}: use N, fixed:N, uniform:A-B or normal:MEAN,STD",
        param="length",
    )
