"""The native worker process: ``python -m fleetgate.multimodal.native.child FD``.

``FD`` is the worker's end of a socket pair. The first frame names the handler factory
(``"module:callable"``) and its keyword arguments; the factory runs once, on the main thread,
before anything else (that is where a native library loads and sets up its global state), and
the worker answers ``("ready", info)``. Then it serves ``(method, args)`` frames one at a time
with ``("ok", result)``, ``("error", fields of a FleetgateError)`` or ``("failed", text)``,
until the gateway closes the socket or goes away.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
import sys
import threading
import time
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.multimodal.native.wire import WireError, dumps, recv_frame, send_frame

__all__ = ["main"]


def _watch_parent(parent: int) -> None:
    # A native call can run for a while; exit soon after the gateway is gone either way.
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _error_fields(exc: FleetgateError) -> dict[str, Any]:
    fields = {"type": type(exc).__name__, "message": exc.message, "param": exc.param}
    extra = getattr(exc, "extra", None)  # MissingExtra names the pip extra
    return {**fields, "code": exc.code, **({"extra": extra} if extra else {})}


def _reply(handler: Any, method: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "ok", getattr(handler, method)(*args)
    except FleetgateError as exc:
        return "error", _error_fields(exc)
    except Exception as exc:  # noqa: BLE001 - reported to the gateway, which answers 503
        return "failed", f"{type(exc).__name__}: {exc}"[:500]


def serve(sock: socket.socket) -> int:
    """Build the handler from the init frame, then answer calls until the socket closes."""
    init = pickle.loads(recv_frame(sock))
    module, _, attr = str(init["factory"]).partition(":")
    try:
        handler = getattr(importlib.import_module(module), attr)(**init["kwargs"])
        info = handler.info() if hasattr(handler, "info") else {}
    except FleetgateError as exc:  # e.g. MissingExtra: the gateway raises it as it is
        send_frame(sock, dumps(("error", _error_fields(exc))))
        return 1
    except Exception as exc:  # noqa: BLE001 - reported: the gateway fails the start cleanly
        send_frame(sock, dumps(("failed", f"{type(exc).__name__}: {exc}"[:500])))
        return 1
    send_frame(sock, dumps(("ready", info)))
    while True:
        try:
            method, args = pickle.loads(recv_frame(sock))
        except (WireError, OSError):
            return 0
        try:
            send_frame(sock, dumps(_reply(handler, str(method), tuple(args))))
        except OSError:
            return 0


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway decides when workers stop
    os.dup2(2, 1)  # native libraries may print; stdout is not ours to write on
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    with socket.socket(fileno=int(argv[1])) as sock:
        return serve(sock)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
