"""Store failures at the edge: a database that cannot be reached is a 503, not a 500.

`is_unreachable` is the one test of "the store is away" (a connection refused, reset or timed
out, a server shutting down or refusing connections to this database); the API's error
middleware answers every such error on any route with 503 ``store_unavailable``, and
`store_unavailable_is_503` does the same for one handler.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from fleetgate.errors import ServiceUnavailable

__all__ = [
    "UNAVAILABLE_SQLSTATES",
    "is_unreachable",
    "not_stored",
    "store_unavailable",
    "store_unavailable_is_503",
]

P = ParamSpec("P")
T = TypeVar("T")


# SQLSTATEs that mean the database is away or not taking this connection now, not that it
# refused the data: class 08 (connection exceptions) by prefix, and these.
UNAVAILABLE_SQLSTATES = frozenset({
    "53300",  # too_many_connections
    "55000",  # object_not_in_prerequisite_state: "database is not accepting connections"
    "55P03",  # lock_not_available
    "57014",  # query_canceled (statement timeout)
    "57P01",  # admin_shutdown
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up, shutting down, in recovery)
    "57P04",  # database_dropped
    "57P05",  # idle_session_timeout
})  # fmt: skip


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error: asyncpg's own, or the one SQLAlchemy's DBAPI wrapper
    (``exc.orig``) carries."""
    for err in (exc, getattr(exc, "orig", None)):
        state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) means the database could not be reached or would
    not serve now (not that it refused data)."""
    seen = 0
    err: BaseException | None = exc
    while err is not None and seen < 4:
        if isinstance(err, OperationalError | InterfaceError | OSError | TimeoutError):
            return True
        if isinstance(err, DBAPIError) and err.connection_invalidated:
            return True
        state = _sqlstate(err)
        if state is not None and (state.startswith("08") or state in UNAVAILABLE_SQLSTATES):
            return True
        err = err.__cause__
        seen += 1
    return False


def store_unavailable(exc: BaseException) -> ServiceUnavailable:
    """The 503 ``store_unavailable`` for ``exc`` (which `is_unreachable`); the cause goes to the
    server log only (``detail``)."""
    return ServiceUnavailable(
        "The database is unreachable; try again shortly.",
        code="store_unavailable",
        detail=repr(exc),
    )


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
            raise store_unavailable(exc) from None

    return guarded
