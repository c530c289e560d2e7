"""The simulator's late corruption (``--corrupt-after-tokens``): a corrupted answer is right
for its first N tokens and wrong after them; and its process memory under vLLM's metric name."""

from __future__ import annotations

import aiohttp

from fleetgate.cli.main import build_parser
from fleetgate.cli.sim import config_from_args
from fleetgate.sim.config import SimConfig
from fleetgate.sim.generation import WORDS, corrupted
from fleetgate.sim.runner import running_sim

LONG = " ".join(WORDS[i % len(WORDS)] for i in range(3000))


def test_corruption_starts_after_n_tokens() -> None:
    late = corrupted(LONG, 1.0, 1500).split()
    words = LONG.split()
    assert late[:1500] == words[:1500] and late[1500:] != words[1500:]
    assert len(late) == len(words)
    assert corrupted(" ".join(words[:100]), 1.0, 1500) == " ".join(words[:100])  # ends before
    assert corrupted(LONG, 1.0).split()[:20] != words[:20]  # 0: wrong from the start


def test_the_flag_reaches_the_config() -> None:
    args = build_parser().parse_args(
        ["sim", "--corrupt-fraction", "1", "--corrupt-after-tokens", "7"]
    )
    assert config_from_args(args).corrupt_after_tokens == 7


async def test_served_answers_drift_late_and_memory_is_exported() -> None:
    config = SimConfig(mode="echo", corrupt_fraction=1.0, corrupt_after_tokens=1500)
    async with running_sim(config) as url, aiohttp.ClientSession() as session:
        body = {"model": "tiny", "messages": [{"role": "user", "content": LONG}],
                "max_tokens": 2500}  # fmt: skip
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            answer = (await resp.json())["choices"][0]["message"]["content"].split()
        assert answer[:1500] == LONG.split()[:1500] and answer[1500:2500] != LONG.split()[1500:2500]
        async with session.get(url + "/metrics") as resp:
            text = await resp.text()
        rss = [
            line for line in text.splitlines() if line.startswith("process_resident_memory_bytes ")
        ]
        assert rss and float(rss[0].split()[1]) > 10e6
