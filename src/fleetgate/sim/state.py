"""Everything one running simulator owns, built in the app's cleanup context."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from fleetgate.sim.config import SimConfig
from fleetgate.sim.disagg import engine_id
from fleetgate.sim.encoder import EncoderCache
from fleetgate.sim.engine import Engine
from fleetgate.sim.metrics import SimMetrics
from fleetgate.sim.tokenizer import Tokenizer
from fleetgate.telemetry.registry import Registry

__all__ = ["SIM_STATE", "SimState", "SimStats"]


@dataclass
class SimStats:
    """Request counters served at ``GET /sim/stats``."""

    received: int = 0
    completed: int = 0
    cancelled: int = 0
    faulted: int = 0
    rejected: int = 0
    kv_pulled_tokens: int = 0  # disaggregated decode: prompt tokens pulled from prefill engines


class SimState:
    """The engine, metrics, tokenizer, RNG and live fault settings of one simulator."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.faults = dataclasses.replace(config.faults)
        self.registry = Registry()
        self.metrics = SimMetrics(self.registry, config.model)
        self.tokenizer = Tokenizer(config.image_tokens)
        self.rng = random.Random(config.seed)
        self.engine = Engine(config, self.metrics)
        self.stats = SimStats()
        self.shutdown = asyncio.Event()
        self.sleeping = False  # vLLM's sleep mode (sim/sleep.py)
        self.sleep_level = 0
        # headers of the last model requests (``GET /sim/requests``)
        self.received_headers: deque[dict[str, str]] = deque(maxlen=1024)
        # where the last model requests spent their time (``GET /sim/timings``)
        self.timings: deque[dict[str, Any]] = deque(maxlen=20_000)
        self.engine_id = engine_id()  # remote_engine_id in disaggregated prefill answers
        self.encoder = EncoderCache(config.encoder_cache_items)
        self.encoder_busy = asyncio.Lock()  # an encoder instance encodes one image at a time

    def stats_dict(self) -> dict[str, Any]:
        """Counters and live engine state, for tests and operators."""
        engine = self.engine
        return {
            "requests_received": self.stats.received,
            "requests_completed": self.stats.completed,
            "requests_cancelled": self.stats.cancelled,
            "requests_faulted": self.stats.faulted,
            "requests_rejected": self.stats.rejected,
            "kv_pulled_tokens": self.stats.kv_pulled_tokens,
            "running": len(engine.running),
            "waiting": len(engine.waiting),
            "kv_cache_usage": engine.kv.usage,
            "kv_blocks_free": engine.kv.num_free,
            "kv_blocks_cached": engine.kv.num_cached,
            "steps": engine.steps,
            "faults": dataclasses.asdict(self.faults),
            "sleeping": self.sleeping,
            "images_encoded": self.encoder.encoded,
            "images_received": self.encoder.received,
            "encoder_cache_hits": self.encoder.hits,
        }


SIM_STATE = web.AppKey("fleetgate_sim_state", SimState)
