"""`AsyncClosing`: the one ``async with`` for objects that are closed with ``aclose()``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing(ABC):
    """``async with obj as same:`` yields ``obj`` itself and awaits ``obj.aclose()`` on the way
    out, whether the block raised or not (exceptions propagate).

    Example::

        class Client(AsyncClosing):
            async def aclose(self) -> None:
                await self.session.close()

        async with Client() as client:
            ...
    """

    __slots__ = ()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds (idempotent)."""
