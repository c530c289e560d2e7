"""Store failures at the edge: a database that cannot be reached is a 503, not a 500."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from fleetgate.errors import ServiceUnavailable

__all__ = ["is_unreachable", "not_stored", "store_unavailable_is_503"]

P = ParamSpec("P")
T = TypeVar("T")


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached (not that it refused data)."""
    if isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def not_stored(what: str, exc: BaseException) -> ServiceUnavailable:
    """The 503 for a change the database could not store (``what``: "the split was not
    changed"); the cause goes to the server log only (``detail``)."""
    return ServiceUnavailable(
        f"The database is unreachable; {what}.", code="store_unavailable", detail=repr(exc)
    )


def store_unavailable_is_503(
    handler: Callable[P, Awaitable[T]],
) -> Callable[P, Awaitable[T]]:
    """Wrap a route handler: an unreachable database answers 503 ``store_unavailable``."""

    @functools.wraps(handler)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await handler(*args, **kwargs)
        except Exception as exc:
            if isinstance(exc, ServiceUnavailable) or not is_unreachable(exc):
                raise
            raise ServiceUnavailable(
                "The database is unreachable; try again shortly.",
                code="store_unavailable",
                detail=repr(exc),
            ) from None

    return guarded
