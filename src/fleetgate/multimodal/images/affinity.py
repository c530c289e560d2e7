"""Remember which deployment recently encoded which image, so routing can prefer it.

Engines such as vLLM keep an encoder cache of recent images; sending a repeated image to the
replica that already encoded it skips the vision tower. Keys are the content addresses from
the image cache (``LoadedImage.cache_key``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

__all__ = ["ImageAffinity"]


class ImageAffinity:
    """Bounded LRU of image key -> (deployment, time seen).

    Example::

        affinity.record([img.cache_key for img in loaded], chosen_deployment)
        preferred = affinity.preferred(keys, [d.id for d in candidates])
    """

    def __init__(
        self,
        *,
        max_entries: int = 100_000,
        ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_entries
        self._ttl = ttl_s
        self._clock = clock
        self._seen: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def record(self, keys: Iterable[str], deployment_id: str) -> None:
        """``deployment_id`` has just been sent (and so encoded) these images."""
        now = self._clock()
        for key in keys:
            self._seen[key] = (deployment_id, now)
            self._seen.move_to_end(key)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)

    def preferred(self, keys: Iterable[str], candidates: Sequence[str]) -> str | None:
        """The candidate that recently encoded the most of ``keys``, or None."""
        now = self._clock()
        allowed = set(candidates)
        votes: dict[str, int] = {}
        for key in keys:
            hit = self._seen.get(key)
            if hit is None or now - hit[1] > self._ttl or hit[0] not in allowed:
                continue
            votes[hit[0]] = votes.get(hit[0], 0) + 1
        if not votes:
            return None
        return max(votes, key=lambda d: (votes[d], -candidates.index(d)))
