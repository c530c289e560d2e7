"""Engine simulator: an OpenAI-compatible server that behaves like a vLLM engine.

Continuous batching, a paged KV cache with prefix caching, vLLM-named metrics and fault
injection, so the gateway, the router and the load tester run without GPUs::

    async with running_sim(SimConfig(decode_ms_per_step=5)) as base_url:
        ...
"""

from fleetgate.sim.app import create_sim_app
from fleetgate.sim.config import FaultConfig, SimConfig, SimMode
from fleetgate.sim.kv import BlockManager
from fleetgate.sim.runner import running_sim, start_sim
from fleetgate.sim.tokenizer import Tokenizer

__all__ = [
    "BlockManager",
    "FaultConfig",
    "SimConfig",
    "SimMode",
    "Tokenizer",
    "create_sim_app",
    "running_sim",
    "start_sim",
]
