"""Resident-memory growth: RSS after N1 requests and after N2, half JSON and half SSE.

wrk cannot stop on a request count by itself: the Lua script stops its thread at the count,
but wrk still sleeps out its ``-d``. So requests are sent in chunks whose duration is sized
from the rate measured so far, each capped by the remaining count; every loop is bounded by
count, by chunk number, and by wall time.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import wrkrun
from targets import Target

CONNECTIONS = 64
MAX_CHUNKS = 200


@dataclass(frozen=True)
class MemorySample:
    """RSS of the target's process tree after ``requests`` requests."""

    requests: int
    rss_mib: float


def send(target: Target, stream: bool, count: int, script_dir: Path, max_s: float) -> int:
    """Send ``count`` requests at concurrency 64; return how many completed."""
    done, rate, started = 0, 0.0, time.monotonic()
    for chunk in range(MAX_CHUNKS):
        remaining = count - done
        left_s = max_s - (time.monotonic() - started)
        if remaining <= 0 or left_s <= 1:
            break
        duration = 3.0 if rate <= 0 else remaining / rate * 1.2 + 1
        duration = min(math.ceil(duration), math.ceil(left_s))
        mode = "sse" if stream else "json"
        script = wrkrun.write_script(
            script_dir / f"mem-{mode}-{chunk}.lua", stream, target.api_key, limit=remaining
        )
        result = wrkrun.WrkResult.parse(wrkrun.run(target.url, script, CONNECTIONS, duration))
        done += result.completed
        if result.failed:
            print(f"  [memory] {target.name}: {result.failed} failed requests", flush=True)
        rate = max(rate, result.completed / duration)
        if result.completed == 0:
            raise RuntimeError(f"{target.name}: no request completed during the memory run")
    return done


def measure(
    target: Target, checkpoints: list[int], script_dir: Path, max_s: float
) -> list[MemorySample]:
    """Sample RSS before load and at each cumulative request count in ``checkpoints``."""
    samples = [MemorySample(0, target.proc.rss_bytes() / 2**20)]
    sent, deadline = 0, time.monotonic() + max_s
    for checkpoint in sorted(checkpoints):
        todo = checkpoint - sent
        for stream in (False, True):
            share = todo // 2 if not stream else todo - todo // 2
            left_s = deadline - time.monotonic()
            if left_s <= 1:
                raise RuntimeError(f"memory run on {target.name} exceeded {max_s:.0f}s")
            sent += send(target, stream, share, script_dir, left_s)
        time.sleep(0.5)  # let in-flight work settle before sampling
        samples.append(MemorySample(sent, target.proc.rss_bytes() / 2**20))
        print(f"  [memory] {target.name}: {sent} requests, RSS {samples[-1].rss_mib:.1f} MiB")
    return samples


def growth(samples: list[MemorySample]) -> float | None:
    """Relative RSS growth from the first checkpoint to the last (0.05 = 5%)."""
    loaded = [s for s in samples if s.requests > 0]
    if len(loaded) < 2 or loaded[0].rss_mib <= 0:
        return None
    return loaded[-1].rss_mib / loaded[0].rss_mib - 1


def to_json(samples: list[MemorySample]) -> list[dict[str, float]]:
    """Samples as plain dicts for the results file."""
    return [asdict(s) for s in samples]
