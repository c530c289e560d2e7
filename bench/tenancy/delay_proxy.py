"""A TCP proxy that adds a fixed one-way delay in each direction: Redis "across a network".

    python bench/tenancy/delay_proxy.py --listen 7001 --target 127.0.0.1:6379 --delay-ms 0.25

Each chunk read from one side is written to the other ``--delay-ms`` after it was read (so a
round trip gains twice that), in order. Threads with `time.sleep` rather than an event loop:
an asyncio timer waits at least a millisecond (epoll's resolution), a sleep ~0.1 ms. It runs
in its own process so its work does not land on the measured client; it serves until killed.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time

Items = queue.SimpleQueue[tuple[float, bytes]]


def _reader(src: socket.socket, out: Items) -> None:
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        out.put((time.perf_counter(), data))
        if not data:
            return


def _writer(dst: socket.socket, items: Items, delay: float) -> None:
    while True:
        at, data = items.get()
        wait = at + delay - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if not data:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        try:
            dst.sendall(data)
        except OSError:
            return


def _direction(src: socket.socket, dst: socket.socket, delay: float) -> None:
    items: Items = queue.SimpleQueue()
    threading.Thread(target=_reader, args=(src, items), daemon=True).start()
    threading.Thread(target=_writer, args=(dst, items, delay), daemon=True).start()


def serve(port: int, target: tuple[str, int], delay: float) -> None:
    server = socket.create_server(("127.0.0.1", port))
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(target)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _direction(client, upstream, delay)
        _direction(upstream, client, delay)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", default="127.0.0.1:6379")
    parser.add_argument("--delay-ms", type=float, required=True, help="one way")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    serve(args.listen, (host or "127.0.0.1", int(port)), args.delay_ms / 1000)
