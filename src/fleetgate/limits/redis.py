"""`RedisLimiter`: exact limits shared by every replica and worker through atomic Lua scripts.

Calls go through `fleetgate.resp.RespClient` (the one pipelined connection per process and Redis
URL, owned by `fleetgate.resources.RedisConnections`, which also closes it), and the
part of each script call that depends only on the scopes (keys, limits) is encoded once per
scope set, so a reservation costs the gateway little more than the round trip.

When Redis cannot be reached the configured policy decides: ``fail_open`` admits the request
unlimited, ``fail_closed`` refuses it with 503. Either way the event is logged and counted, and
for ``breaker_s`` afterwards requests do not wait on Redis at all (no queue builds up: replies
later than the client's timeout break the connection, and the commands in flight are bounded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from fleetgate.errors import LimiterUnavailable
from fleetgate.limits.base import LEASE_MS, WINDOW_MS, Denial, Reservation, Scope, ScopeUsage
from fleetgate.limits.scripts import RAISE_SPEND, RESERVE, SETTLE
from fleetgate.resp import CommandNotSent, RespClient, RespError, Script, bulk, encode_command
from fleetgate.timespans import DAY_MS

__all__ = ["FailPolicy", "RedisLimiter"]

log = logging.getLogger("fleetgate.limits")

FailPolicy = Literal["fail_open", "fail_closed"]
_REASONS = {1: "requests", 2: "tokens", 3: "parallel", 4: "budget"}
# An error reply (READONLY during a failover, OOM, a script error) fails like an outage: the
# policy decides, never a 500.
_DOWN = (ConnectionError, TimeoutError, OSError, RespError)
_RESERVE = Script(RESERVE)
_SETTLE = Script(SETTLE)
_RAISE_SPEND = Script(RAISE_SPEND)
_MAX_ENCODED = 50_000  # scope sets whose commands are kept encoded
# Loaded on each new connection before its first script call (`RedisLimiter._preload`).
_LOADS = tuple(encode_command("SCRIPT", "LOAD", s.source) for s in (_RESERVE, _SETTLE))


@dataclass(frozen=True, slots=True)
class _Encoded:
    """``EVALSHA`` of both scripts for one scope set, split around the per-request arguments:
    a command is ``head + member + tokens [+ cost] + tail``."""

    reserve_head: bytes
    reserve_tail: bytes
    settle_head: bytes
    settle_tail: bytes


def _encode(prefix: str, scopes: tuple[Scope, ...]) -> _Encoded:
    keys: list[str] = []
    for s in scopes:
        base = f"{prefix}lim:{s.name}:"
        keys += [base + "rq", base + "tk", base + "th", base + "par"]
        keys.append(f"{prefix}spend:{s.budget_key}")
    reserve_static: list[int] = [len(scopes), WINDOW_MS, LEASE_MS]
    settle_static: list[int] = [len(scopes)]
    for s in scopes:
        reserve_static += [
            -1 if s.rpm is None else s.rpm,
            -1 if s.tpm is None else s.tpm,
            -1 if s.max_parallel is None else s.max_parallel,
            -1 if s.budget_nusd is None else s.budget_nusd,
            s.period_end_ms,
        ]
        settle_static += [0 if s.budget_nusd is None else 1, s.period_end_ms + DAY_MS]

    def head(script: Script, dynamic: int, static: int) -> bytes:
        count = 3 + len(keys) + dynamic + static  # the array header counts every argument
        fixed: list[str | int] = ["EVALSHA", script.sha, len(keys), *keys]
        return b"*%d\r\n" % count + b"".join(bulk(a) for a in fixed)

    return _Encoded(
        head(_RESERVE, 2, len(reserve_static)),
        b"".join(bulk(v) for v in reserve_static),
        head(_SETTLE, 3, len(settle_static)),
        b"".join(bulk(v) for v in settle_static),
    )


def _copy_outcome(target: asyncio.Future[Any], source: asyncio.Future[Any]) -> None:
    """``source``'s result, exception or cancellation onto ``target`` (unless it is done)."""
    if target.done():
        if not source.cancelled():
            source.exception()  # retrieved: no "never retrieved" warning
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


def _retrieved(sent: asyncio.Future[Any]) -> None:
    """A script load's reply: a failure is the next command's to report."""
    if not sent.cancelled():
        sent.exception()


def _reservation(
    member: str, scopes: tuple[Scope, ...], tokens: int, values: list[int]
) -> Reservation | Denial:
    """The reserve script's reply: a refusal (1), or a grant (0, or 2 when a parallel-limited
    scope is more than half full) with the remaining requests and tokens per scope."""
    if values[0] == 1:
        return Denial(scopes[values[1]].name, _REASONS[values[2]], values[3])
    usage = [
        ScopeUsage(
            None if values[i] < 0 else values[i],
            None if values[i + 1] < 0 else values[i + 1],
            values[i + 2],
            values[i + 3],
        )
        for i in range(1, len(values), 4)
    ]
    return Reservation(member, scopes, tokens, True, usage, crowded=values[0] == 2)


class RedisLimiter:
    """See `fleetgate.limits.base.Limiter`. ``on_unavailable(policy)`` counts outages.

    ``redis``: a connection with short timeouts and a bounded queue (``RespClient`` defaults),
    normally ``resources.redis.commands(url)``; its owner closes it, not the limiter.
    """

    def __init__(
        self,
        redis: RespClient,
        *,
        prefix: str = "fg:",
        policy: FailPolicy = "fail_closed",
        breaker_s: float = 1.0,
        on_unavailable: Callable[[str], None] | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.policy: FailPolicy = policy
        self.breaker_s = breaker_s
        self._on_unavailable = on_unavailable
        self._down_until = 0.0
        self._outages = 0
        self._encoded: dict[tuple[Scope, ...], _Encoded] = {}
        self._loaded_on = -1  # `RespClient.connects` when the scripts were last loaded

    def _preload(self) -> None:
        """Load the scripts on a connection they were not loaded on yet (the first one, or
        one to a Redis that may have restarted empty), ahead of the command about to leave
        on it: pipelined, so the command finds them and costs no extra round trip. Without
        this each script's first call on a fresh Redis answers NOSCRIPT and is sent again a
        round trip later, so a settle sent before a response could reach Redis after the
        client's next reservation, which was then refused for the slot being freed."""
        redis = self.redis
        if redis.connects == self._loaded_on:
            return
        loads = [redis.send_now(command) for command in _LOADS]
        for sent in loads:
            if sent is not None:
                sent.add_done_callback(_retrieved)
        if all(sent is not None for sent in loads):
            self._loaded_on = redis.connects

    async def _load_scripts(self) -> None:
        """Connect if needed and load the scripts (the slow path: no connection yet)."""
        await asyncio.gather(*(self.redis.send(command) for command in _LOADS))
        self._loaded_on = self.redis.connects

    async def _eval(self, command: bytes, sent: asyncio.Future[Any] | None) -> Any:
        """The reply of an encoded script call (``sent``: already sent). On NOSCRIPT (Redis
        lost its scripts without this connection breaking: a SCRIPT FLUSH, a failover behind
        a proxy) every script is loaded again before the call is sent again, so the next
        call of another script does not answer NOSCRIPT too."""
        try:
            if sent is None:
                await self._load_scripts()  # not connected yet: connect and load first
                return await self.redis.send(command)
            return await sent
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        self._loaded_on = -1
        await self._load_scripts()
        return await self.redis.send(command)

    def _commands(self, scopes: tuple[Scope, ...]) -> _Encoded:
        enc = self._encoded.get(scopes)
        if enc is None:
            if len(self._encoded) >= _MAX_ENCODED:
                self._encoded.clear()
            enc = self._encoded[scopes] = _encode(self.prefix, scopes)
        return enc

    def _unavailable(self, exc: BaseException, *, decided: bool) -> None:
        """Open the breaker; ``decided``: a request was admitted or refused by the policy."""
        if time.monotonic() >= self._down_until:
            self._outages += 1
            log.warning("rate limiter: Redis unavailable (%s); policy %s", exc, self.policy)
        self._down_until = time.monotonic() + self.breaker_s
        if decided and self._on_unavailable is not None:
            self._on_unavailable(self.policy)

    def _degraded(self, member: str, scopes: tuple[Scope, ...], tokens: int) -> Reservation:
        if self.policy == "fail_closed":
            raise LimiterUnavailable("Rate limiting is unavailable; try again shortly.")
        return Reservation(member, scopes, tokens, enforced=False)

    def generation(self) -> int:
        return self.redis.connects + self._outages

    async def reserve(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> Reservation | Denial:
        if time.monotonic() < self._down_until:
            if self._on_unavailable is not None:
                self._on_unavailable(self.policy)
            return self._degraded(member, scopes, tokens)
        command = self._reserve_command(member, scopes, tokens)
        self._preload()
        # Written now when nothing else is in flight (not at the end of the loop turn): the
        # round trip starts a loop iteration earlier.
        return await self._reserved(member, scopes, tokens, command, self.redis.send_now(command))

    def reserve_sent(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> asyncio.Future[Reservation | Denial] | None:
        """`reserve`, sent with this loop turn's writes; the future resolves from the reply's
        own callback (no task per request; a NOSCRIPT reload or a failure goes through
        `_reserved`)."""
        if time.monotonic() < self._down_until:
            return None
        command = self._reserve_command(member, scopes, tokens)
        self._preload()
        # Written at the end of this loop turn: after the upstream request the caller sends
        # meanwhile (on a busy host the write that wakes Redis costs tens of microseconds).
        sent = self.redis.send_soon(command)
        if sent is None:
            return None
        done: asyncio.Future[Reservation | Denial] = sent.get_loop().create_future()
        sent.add_done_callback(
            partial(self._reserve_replied, member, scopes, tokens, command, done)
        )
        return done

    def _reserve_command(self, member: str, scopes: tuple[Scope, ...], tokens: int) -> bytes:
        enc = self._commands(scopes)
        return enc.reserve_head + bulk(member) + bulk(tokens) + enc.reserve_tail

    def _reserve_replied(
        self,
        member: str,
        scopes: tuple[Scope, ...],
        tokens: int,
        command: bytes,
        done: asyncio.Future[Reservation | Denial],
        sent: asyncio.Future[Any],
    ) -> None:
        if done.cancelled():
            return
        if not sent.cancelled() and sent.exception() is None:
            done.set_result(_reservation(member, scopes, tokens, sent.result()))
            return
        # NOSCRIPT (load the script, send again), a failure or a cancelled reply (the
        # connection closed): the coroutine maps it as `reserve` does.
        task = asyncio.ensure_future(self._reserved(member, scopes, tokens, command, sent))
        task.add_done_callback(partial(_copy_outcome, done))

    async def _reserved(
        self,
        member: str,
        scopes: tuple[Scope, ...],
        tokens: int,
        command: bytes,
        sent: asyncio.Future[Any] | None,
    ) -> Reservation | Denial:
        try:
            if sent is not None and sent.cancelled():
                raise ConnectionError("the connection to Redis closed")
            values = await self._eval(command, sent)
        except _DOWN as exc:
            self._unavailable(exc, decided=True)
            return self._degraded(member, scopes, tokens)
        return _reservation(member, scopes, tokens, values)

    def settle(
        self, reservation: Reservation, tokens: int, cost_nusd: int
    ) -> asyncio.Future[dict[str, int]]:
        """Free the parallel slot, true up the tokens, add the cost. The command is sent when
        this is called, not when it is awaited. A `Reservation.crowded` one (a parallel scope
        more than half full) is written at once, even while other commands are in flight
        (`RespClient.send_first`), so a settle issued before a response is written reaches
        Redis before the client has the response; any other leaves with this loop turn's writes,
        just after the response (`RespClient.send_soon`: the write that wakes Redis no longer
        delays the answer). Settles of concurrent requests share the connection and so reach
        Redis pipelined.

        Returns a future, resolved from the reply's own callback: no task and no coroutine
        step per settle (the rare NOSCRIPT reload and the failures go through `_settled`)."""
        scopes = reservation.scopes
        if time.monotonic() < self._down_until:
            return asyncio.ensure_future(self._settle_unavailable())
        enc = self._commands(scopes)
        command = (
            enc.settle_head
            + bulk(reservation.member)
            + bulk(tokens)
            + bulk(cost_nusd)
            + enc.settle_tail
        )
        self._preload()
        # A crowded reservation's settle is written at once (before the response); any other
        # leaves with the loop turn's writes, just after the response: its slot cannot be
        # what refuses the client's next request (the scope was at most half full with it).
        if reservation.crowded:
            sent = self.redis.send_first(command)
        else:
            sent = self.redis.send_soon(command)
        if sent is None:  # not connected yet, or too many waiting: the general path
            return asyncio.ensure_future(self._settled(scopes, command, None))
        done: asyncio.Future[dict[str, int]] = sent.get_loop().create_future()
        sent.add_done_callback(partial(self._settle_replied, scopes, command, done))
        return done

    def _settle_replied(
        self,
        scopes: tuple[Scope, ...],
        command: bytes,
        done: asyncio.Future[dict[str, int]],
        sent: asyncio.Future[Any],
    ) -> None:
        if done.cancelled():
            return
        if sent.cancelled():
            done.cancel()
            return
        if sent.exception() is None:
            out = sent.result()
            done.set_result({s.name: v for s, v in zip(scopes, out, strict=True) if v >= 0})
            return
        # NOSCRIPT (load the script, send again) or a failure: the coroutine maps it.
        task = asyncio.ensure_future(self._settled(scopes, command, sent))
        task.add_done_callback(partial(_copy_outcome, done))

    async def _settle_unavailable(self) -> dict[str, int]:
        raise LimiterUnavailable("Redis is unavailable; settle later")

    async def _settled(
        self, scopes: tuple[Scope, ...], command: bytes, sent: asyncio.Future[Any] | None
    ) -> dict[str, int]:
        try:
            if sent is None:
                try:
                    await self._load_scripts()
                except _DOWN as exc:  # the settle itself has not left
                    raise CommandNotSent(f"scripts not loaded: {exc}") from exc
                sent = self.redis.send_now(command)
            out = await self._eval(command, sent)
        except CommandNotSent as exc:
            self._unavailable(exc, decided=False)
            raise LimiterUnavailable(f"settle not sent: {exc}") from exc
        except _DOWN as exc:
            self._unavailable(exc, decided=False)
            raise LimiterUnavailable(f"settle lost: {exc}", maybe_applied=True) from exc
        return {s.name: v for s, v in zip(scopes, out, strict=True) if v >= 0}

    async def spent(self, scope: Scope) -> int | None:
        try:
            value = await self.redis.call("GET", f"{self.prefix}spend:{scope.budget_key}")
        except _DOWN:
            return None
        return int(value or 0)

    async def raise_spend(self, scope: Scope, nusd: int) -> None:
        key = f"{self.prefix}spend:{scope.budget_key}"
        ttl = max(scope.period_end_ms + DAY_MS - int(time.time() * 1000), 1000)
        await self.redis.eval(_RAISE_SPEND, [key], [nusd, min(ttl, 2**40)])

    async def aclose(self) -> None:
        """Nothing of its own to release: the connection belongs to whoever handed it over."""
