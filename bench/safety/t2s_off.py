"""The input checks as they were before Traditional -> Simplified folding (issue #38), for
benchmarks that measure the folding against its absence in one run.

``with no_t2s(): ...`` makes every :class:`~fleetgate.safety.normalize.Normalizer` constructed
inside it (the word-list check's, the classifier check's) skip the table; pass the classifier
check ``Glosser(simplify=False)`` as well, so its embedding reads the raw text too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import fleetgate.safety.normalize as normalize


def _empty() -> Mapping[str, str]:
    return {}


@contextmanager
def no_t2s() -> Iterator[None]:
    saved = normalize.traditional_to_simplified
    normalize.traditional_to_simplified = _empty  # type: ignore[assignment]
    try:
        yield
    finally:
        normalize.traditional_to_simplified = saved
