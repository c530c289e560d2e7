"""Cost of streaming moderation per delta with the built-in word + PII checks.

Feeds the same synthetic reply (one word per delta, English and Chinese) through a
StreamModerator and through a pass-through, and prints p50/p99 per-delta time of both and the
added p50 in microseconds. In-process only: the gateway-level inter-token latency comparison is
the overhead bench's job.

    PYTHONPATH=src python bench/safety_stream.py --deltas 5000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from fleetgate.safety import CheckConfig, Guardrails, PolicyConfig, SafetyConfig, StreamConfig

TEXT = (
    "The deployment finished and every replica reports healthy; 部署已经完成，所有副本都正常。 "
    * 50
).split(" ")


async def measure(deltas: int, moderated: bool) -> list[float]:
    config = SafetyConfig(
        checks={"words": CheckConfig(type="words"), "pii": CheckConfig(type="pii")},
        policies={
            "default": PolicyConfig(
                stream=["words", "pii"] if moderated else [], stream_options=StreamConfig()
            )
        },  # fmt: skip
    )
    mod = Guardrails(config).policy("default").stream_moderator()
    out: list[float] = []
    for i in range(deltas):
        word = TEXT[i % len(TEXT)] + " "
        t0 = time.perf_counter()
        await mod.push(word)
        out.append(time.perf_counter() - t0)
    await mod.finish()
    return out


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[int(q * (len(xs) - 1))] * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deltas", type=int, default=5000)
    args = parser.parse_args()
    base = await measure(args.deltas, False)
    mod = await measure(args.deltas, True)
    print(f"pass-through  p50 {pct(base, 0.5):7.1f} us  p99 {pct(base, 0.99):7.1f} us")
    print(f"moderated     p50 {pct(mod, 0.5):7.1f} us  p99 {pct(mod, 0.99):7.1f} us"
          f"  mean {statistics.fmean(mod) * 1e6:7.1f} us")  # fmt: skip
    print(f"added p50 per delta: {pct(mod, 0.5) - pct(base, 0.5):.1f} us")


if __name__ == "__main__":
    asyncio.run(main())
