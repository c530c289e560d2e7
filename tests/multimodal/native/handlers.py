"""Worker handlers for the native pool tests (imported inside the worker processes)."""

from __future__ import annotations

import ctypes
import os
import time

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require


class Handler:
    def __init__(self, *, fail_start: bool = False, needs: str | None = None) -> None:
        if fail_start:
            raise RuntimeError("no model files here")
        if needs is not None:
            require(needs, extra="audio", purpose="testing")
        self.calls = 0

    def info(self) -> dict[str, int]:
        return {"pid": os.getpid()}

    def pid(self) -> int:
        self.calls += 1
        return os.getpid()

    def count(self) -> int:
        return self.calls

    def echo(self, data: bytes) -> bytes:
        return data

    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    def segfault(self) -> None:
        ctypes.string_at(0)  # reads address 0: SIGSEGV in native code

    def refuse(self) -> None:
        raise InvalidRequest("not this one", param="file", code="nope")

    def bug(self) -> None:
        raise KeyError("oops")

    def global_reference(self) -> object:
        return os.system  # a reference to a global: must not be loaded by the gateway
