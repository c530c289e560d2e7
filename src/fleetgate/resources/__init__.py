"""What the features of one gateway process share, and the one object that owns it.

See `fleetgate.resources.owner.Resources`.
"""

from fleetgate.resources.databases import Databases
from fleetgate.resources.embedder import Embedder
from fleetgate.resources.minilm import MiniLM, MiniLMEmbedder
from fleetgate.resources.outbound import JsonService, OutboundHttp
from fleetgate.resources.owner import Resources
from fleetgate.resources.redis import RedisConnections
from fleetgate.resources.shared import SharedStates

__all__ = [
    "Databases",
    "Embedder",
    "JsonService",
    "MiniLM",
    "MiniLMEmbedder",
    "OutboundHttp",
    "RedisConnections",
    "Resources",
    "SharedStates",
]
