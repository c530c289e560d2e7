"""The in-process limiter's memory under a steady request rate, on a fake clock.

One scope with every limit (as the soak's key), ``--rate`` reservations a simulated second,
each settled at once, for ``--seconds`` simulated seconds; every 10 s it prints the RSS growth
since the start. The windows hold the last 60 s, so the growth should stop after the first
minute, and (the log being per millisecond) not depend on the rate above 1,000/s.

    PYTHONPATH=src python bench/soak/limiter_memory.py --rate 2800 --seconds 120
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from fleetgate.limits import MemoryLimiter, Reservation, Scope


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(rate: int, seconds: int) -> None:
    now = [1_700_000_000.0]
    limiter = MemoryLimiter(clock=lambda: now[0])
    scopes = (Scope("key:soak", rpm=10**9, tpm=2 * 10**9, max_parallel=100_000),)
    base = _rss_mb()
    for second in range(1, seconds + 1):
        for _ in range(rate):
            now[0] += 1 / rate
            member = f"req_{os.urandom(12).hex()}:{os.urandom(4).hex()}"
            reservation = await limiter.reserve(member, scopes, 40)
            assert isinstance(reservation, Reservation)
            await limiter.settle(reservation, 30, 100)
        if second % 10 == 0:
            print(f"t={second:4d}s  RSS {_rss_mb() - base:+7.1f} MB", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=2800, help="reservations a second (<= 50000)")
    parser.add_argument("--seconds", type=int, default=120, help="simulated seconds (<= 600)")
    args = parser.parse_args()
    if not (0 < args.rate <= 50_000 and 0 < args.seconds <= 600):
        parser.error("--rate in (0, 50000], --seconds in (0, 600]")
    asyncio.run(main(args.rate, args.seconds))
