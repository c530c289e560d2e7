"""Frames between the gateway and a native worker process: a 4-byte length, then a pickle.

Messages hold only builtins (str, bytes, numbers, lists, tuples, dicts, None). The gateway reads
the worker's answers with :func:`loads_plain`, which refuses every global, so a worker taken
over by hostile input can send wrong data but never code to run in the gateway.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
from typing import Any

__all__ = ["MAX_FRAME_BYTES", "WireError", "dumps", "loads_plain", "recv_frame", "send_frame"]

MAX_FRAME_BYTES = 1 << 30
_HEADER = struct.Struct(">I")


class WireError(Exception):
    """The other side closed the connection or sent something that is not a frame."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise WireError(f"a worker frame may not reference {module}.{name}")


def dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def loads_plain(data: bytes) -> Any:
    """Unpickle builtins only (see the module docstring)."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed pickle is a protocol error
        raise WireError(f"malformed worker frame: {exc!r}") from exc


def send_frame(sock: socket.socket, payload: bytes) -> None:
    """Write one frame (blocking)."""
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise WireError("the worker closed the connection")
        got += n
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    """Read one frame (blocking; honours the socket's timeout)."""
    (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    if size > MAX_FRAME_BYTES:
        raise WireError(f"frame of {size} bytes is over the {MAX_FRAME_BYTES} limit")
    return _recv_exactly(sock, size)
