"""One ZMQ subscription per engine that publishes KV-cache events (vLLM ``--kv-events-config``).

Each engine's publisher sends multipart messages ``(topic, seq as 8 bytes big-endian, payload)``
on a PUB socket and, on its ROUTER replay socket, answers a request for ``start_seq`` (8 bytes
big-endian) with every buffered ``(seq, payload)`` from it on, then ``(-1, b"")``. The task here
reads the stream into `EventBlockIndex`; at its first message, and at every sequence gap, it
asks the replay socket for what it missed. What a replay cannot fill (the buffer moved on, no
replay socket, no answer within ``replay_timeout_s``) leaves that engine's index untrusted for a
while (see `fleetgate.routing.kv_events`), so routing falls back to the gateway's own index.

Needs the ``kv-events`` extra (``pyzmq``, ``msgpack``); without it the subscriptions are not
started and a warning says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from fleetgate.config.schema import KvEventsConfig
from fleetgate.routing.kv_events import EventBlockIndex, WireError, decode_batch
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry

__all__ = ["KvEventSubscribers"]

log = logging.getLogger("fleetgate.routing")

_END = -1


class KvEventSubscribers:
    """Subscription tasks keyed by engine; `sync` starts new ones and stops departed ones."""

    def __init__(
        self,
        index: EventBlockIndex,
        registry: Registry | None = None,
        *,
        replay_timeout_s: float = 1.0,
    ) -> None:
        self.index = index
        self.replay_timeout_s = replay_timeout_s
        self._tasks: dict[str, tuple[KvEventsConfig, asyncio.Task[None]]] = {}
        self._ctx: Any = None
        r = registry or Registry()
        self._batches = r.counter(
            "fleetgate_kv_events_batches_total", "KV-event batches applied, by engine", ["engine"]
        )
        self._gaps = r.counter(
            "fleetgate_kv_events_gaps_total",
            "Sequence gaps in an engine's KV-event stream, by whether a replay filled them",
            ["engine", "filled"],
        )
        self._errors = r.counter(
            "fleetgate_kv_events_errors_total", "KV-event payloads that did not decode", ["engine"]
        )
        trusted = r.gauge(
            "fleetgate_kv_events_trusted",
            "1 while routing uses an engine's reported blocks (0: the gateway's own index)",
            ["engine"],
        )
        trusted.set_collector(lambda: [((k,), float(index.trusted(k))) for k in list(self._tasks)])
        blocks = r.gauge(
            "fleetgate_kv_events_blocks", "Blocks an engine reports holding", ["engine"]
        )
        blocks.set_collector(lambda: [((k,), float(index.size(k))) for k in list(self._tasks)])

    @property
    def engines(self) -> list[str]:
        return list(self._tasks)

    def sync(self, targets: Mapping[str, KvEventsConfig]) -> None:
        """Subscribe to ``targets`` (engine key -> endpoints); drop the others."""
        for key in [k for k in self._tasks if targets.get(k) != self._tasks[k][0]]:
            self._tasks.pop(key)[1].cancel()
            self.index.forget(key)
        if not targets:
            return
        try:
            import zmq.asyncio
        except ImportError:
            log.warning("kv_events needs pyzmq: pip install 'fleetgate[kv-events]'")
            return
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        loop = asyncio.get_running_loop()
        for key, cfg in targets.items():
            if key not in self._tasks:
                task = loop.create_task(self._run(key, cfg), name=f"fg-kv-events:{key}")
                self._tasks[key] = (cfg, task)

    async def aclose(self) -> None:
        tasks = [t for _, t in self._tasks.values()]
        self._tasks.clear()
        for task in tasks:
            await cancel_and_wait(task)
        if self._ctx is not None:
            # destroy, not term: term waits for every socket to be closed, and one a task did
            # not get to close (still stopping past cancel_and_wait's bound) hung the
            # shutdown, and the event loop with it; destroy closes them (linger 0) first
            self._ctx.destroy(linger=0)
            self._ctx = None

    # ---------------------------------------------------------------- one engine

    async def _run(self, key: str, cfg: KvEventsConfig) -> None:
        """Follow the engine until cancelled; a broken subscription is opened again."""
        while True:
            try:
                await self._follow(key, cfg)
            except asyncio.CancelledError:
                raise
            except Exception:  # the index stays untrusted until events flow again
                log.exception("kv events of %s: subscription failed, reopening", key)
                self.index.distrust(key, clear=True)
                await asyncio.sleep(1.0)

    async def _follow(self, key: str, cfg: KvEventsConfig) -> None:
        import zmq

        sub = self._ctx.socket(zmq.SUB)
        try:  # a refused endpoint (connect raises) closes the socket too: it leaked one a retry
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, cfg.topic.encode())
            sub.connect(cfg.endpoint)
            # What the engine published before we listened (subscribed first, so nothing is
            # missed between): the replay buffer from 0; batches heard twice are skipped.
            catching_up = await self._replay(key, 0, None)
            while True:
                frames = await sub.recv_multipart()
                if len(frames) != 3:
                    self._errors.labels(key).inc()
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                expected = self.index.expects(key)
                if seq < expected:
                    if catching_up:
                        continue  # already had it from the replay
                    self.index.forget(key)  # the engine restarted: its sequence began again
                    expected = 0
                catching_up = False
                if seq > expected:
                    started = self.index.engine(key).started
                    filled = await self._replay(key, expected, seq)
                    if started:  # joining a stream late is no gap
                        self._gaps.labels(key, "yes" if filled else "no").inc()
                    if not filled:
                        self.index.skip_to(key, seq)
                self._apply(key, seq, frames[2])
        finally:
            sub.close(linger=0)

    def _apply(self, key: str, seq: int, payload: bytes) -> bool:
        try:
            _, events = decode_batch(payload)
        except WireError as exc:
            self._errors.labels(key).inc()
            log.warning("kv events of %s: batch %d does not decode: %s", key, seq, exc)
            self.index.skip_to(key, seq + 1)
            return False
        applied = self.index.apply_batch(key, seq, events)
        if applied:
            self._batches.labels(key).inc()
        return applied

    async def _replay(self, key: str, start: int, upto: int | None) -> bool:
        """Fetch batches ``start..upto-1`` (None: all buffered) from the replay socket; True
        if all were applied (with ``upto`` None: if the replay answered at all)."""
        cfg = self._tasks[key][0] if key in self._tasks else None
        if cfg is None or cfg.replay_endpoint is None:
            return False
        import zmq

        dealer = self._ctx.socket(zmq.DEALER)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.replay_timeout_s
        try:
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(cfg.replay_endpoint)  # inside: a refused endpoint closes it too
            # A DEALER without a connected peer (engine down) blocks on send: bounded too.
            try:
                await asyncio.wait_for(
                    dealer.send_multipart([b"", start.to_bytes(8, "big")]), self.replay_timeout_s
                )
            except TimeoutError:
                return False
            heard = False
            while upto is None or self.index.expects(key) < upto:
                left = deadline - loop.time()
                if left <= 0 or not await dealer.poll(int(left * 1000)):
                    return False
                frames = await dealer.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                if seq == _END or not frames[2]:
                    if upto is None and not heard:
                        self.index.start_empty(key)
                    return upto is None
                heard = True
                if seq >= start and (upto is None or seq < upto):
                    self._apply(key, seq, frames[2])
            return True
        finally:
            dealer.close(linger=0)
