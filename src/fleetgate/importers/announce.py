"""Tell running gateways that keys and teams changed, the way an admin change does.

Each replica's `fleetgate.tenancy.sync.CacheSync` reloads its keys on a message on
``<prefix>tenancy:changed``; while that Redis feed is up it does not poll the store's change
counter, so a change written without the message (an import) would stay unseen until some
unrelated admin change. The importer therefore bumps the counter (replicas without Redis
poll it) *and* publishes the message.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["announce_tenancy_change", "tenancy_channel"]


def tenancy_channel(prefix: str) -> str:
    """The channel `CacheSync` listens on for ``tenancy.redis_prefix`` ``prefix``."""
    return f"{prefix}tenancy:changed"


async def announce_tenancy_change(redis_url: str, prefix: str, version: int) -> str | None:
    """Publish the change; a note saying what went wrong, or None when it was published."""
    client = Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        await client.publish(tenancy_channel(prefix), str(version))
    except (RedisError, OSError) as exc:
        return (
            f"could not tell running gateways through Redis ({exc}); they see the imported "
            "keys after their next reload (restart them, or make any admin change)"
        )
    finally:
        await client.aclose()
    return None
