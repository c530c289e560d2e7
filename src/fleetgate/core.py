"""`Core`: what every feature is built from, and `Port`: the typed names features meet by.

Every feature class has one constructor for the app, ``build(core) -> Feature | None`` (None:
switched off, its section absent or ``enabled: false``). `Core` holds the ground-floor parts
(settings, the config at build time, the shared resources, the metrics, admin access, request
ids, the authenticator chain) and `Ports`: typed slots a feature fills when it is built
(``core.ports.provide(TENANCY, runtime)``) and a later one asks for
(``core.ports.get(TENANCY)``, None when off; ``require`` when it cannot run without it).
Ports are filled at build time only: a feature keeps what it asked for, it never looks another
feature up at request time. A port is declared (``Port[T]("name")``) in the package of the
type it carries, next to that type.

This module is the ground floor: it imports no feature package.

Example::

    TENANCY: Port[Tenancy] = Port("tenancy")        # tenancy/ports.py

    class SpendFeature(BaseFeature):
        @classmethod
        def build(cls, core: Core) -> SpendFeature | None:
            tenancy = core.ports.get(TENANCY)
            return None if tenancy is None else cls(tenancy, core.access)
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Authenticator, Principal, bearer_token
from fleetgate.errors import AuthenticationFailed
from fleetgate.http import AdminAccess
from fleetgate.resources import Resources
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["AuthChain", "Core", "Port", "Ports", "RequestIds"]

T = TypeVar("T")


class Port(Generic[T]):
    """A typed name for one part a feature provides (like aiohttp's ``AppKey``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Port {self.name}>"


class Ports:
    """The parts features provided, by `Port`: each provided once, at build time."""

    def __init__(self) -> None:
        self._values: dict[Port[Any], object] = {}

    def provide(self, port: Port[T], value: T) -> T:
        """Fill ``port`` (a second provider of the same port is a wiring error)."""
        if port in self._values:
            raise RuntimeError(f"port {port.name} is already provided")
        self._values[port] = value
        return value

    def get(self, port: Port[T]) -> T | None:
        """What ``port`` holds, or None when no feature provides it (switched off)."""
        return cast("T | None", self._values.get(port))

    def require(self, port: Port[T]) -> T:
        """What ``port`` holds; a wiring error when no feature provided it."""
        if port not in self._values:
            raise RuntimeError(f"port {port.name} is not provided (is its feature built?)")
        return cast(T, self._values[port])

    def __contains__(self, port: Port[Any]) -> bool:
        return port in self._values


class AuthChain:
    """The authenticator chain: the master key first, then what features add in order.

    ``add(auth, claims=...)`` adds an authenticator for the tokens ``claims`` accepts (the
    console's JWT bearers: tokens shaped like a JWT); those are asked before the catch-all one
    (``claims=None``: tenancy's virtual keys), which answers every other token. With none, any
    token but the master key is a 401. Answers from memory (hot path).
    """

    def __init__(self, master_key: str | None) -> None:
        self._master = master_key.encode() if master_key else None
        self._principal = Principal(key_id="master", role="master")
        self._claimed: list[tuple[Callable[[str], bool], Authenticator]] = []
        self._rest: Authenticator | None = None
        self._before: tuple[str, ...] = ()  # key headers read before ``Authorization``
        self._after: tuple[str, ...] = ()  # and after it

    def read_key_headers(self, *, before: tuple[str, ...], after: tuple[str, ...]) -> None:
        """Also take the key from these headers (a compatibility feature's clients send it
        there: ``x-litellm-api-key``, Azure's ``api-key``): ``before`` win over
        ``Authorization``, ``after`` are read when it is absent. A value may carry ``Bearer ``."""
        self._before += before
        self._after += after

    def key_of(self, headers: Mapping[str, str]) -> str:
        """The key a request presents: the first key header that is set (`read_key_headers`),
        else ``Authorization: Bearer``; a 401 when there is none."""
        for name in self._before:
            if value := headers.get(name):
                return _strip_bearer(value)
        authorization = headers.get("Authorization")
        if not authorization:
            for name in self._after:
                if value := headers.get(name):
                    return _strip_bearer(value)
        return bearer_token(authorization)

    def authenticate_request(self, headers: Mapping[str, str]) -> Principal:
        """The caller of a request with ``headers`` (`key_of`, then `authenticate`)."""
        return self.authenticate(self.key_of(headers))

    def add(self, auth: Authenticator, *, claims: Callable[[str], bool] | None = None) -> None:
        if claims is not None:
            self._claimed.append((claims, auth))
        elif self._rest is not None:
            raise RuntimeError("the authenticator chain already has a catch-all authenticator")
        else:
            self._rest = auth

    def authenticate(self, token: str) -> Principal:
        # Keys are printable ASCII; anything else (non-UTF-8 header bytes arrive as surrogates)
        # is no key of ours, and must not reach an encoder that would raise.
        if not (token.isascii() and token.isprintable()):
            raise AuthenticationFailed("Invalid API key.")
        if self._master is not None and hmac.compare_digest(token.encode(), self._master):
            return self._principal
        for claims, auth in self._claimed:
            if claims(token):
                return auth.authenticate(token)
        if self._rest is not None:
            return self._rest.authenticate(token)
        raise AuthenticationFailed("Invalid API key.")


def _strip_bearer(value: str) -> str:
    scheme, sep, rest = value.strip().partition(" ")
    return rest.strip() if sep and scheme.lower() == "bearer" else value.strip()


class RequestIds:
    """Request ids no caller can guess from its own: the time in milliseconds (12 hex digits),
    a sequence number within that millisecond (4 hex digits: ids of one process sort in the
    order they were issued, also within a millisecond) and 64 bits from the OS's CSPRNG (unique
    across replicas and restarts). They name answers to clients (``x-request-id``, feedback),
    so they must not be a counter a neighbour could step: the random part is not one."""

    # The random parts of this many ids are read from the CSPRNG at once (one read, instead of
    # one per request), and never shared with a forked child: one made after a fork reads anew.
    _BATCH = 256

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._hex = ""
        self._at = self._end = self._pid = 0
        self._ms = -1
        self._seq = 0

    def next(self) -> str:
        at = self._at
        if at >= self._end or self._pid != os.getpid():
            self._hex = secrets.token_hex(8 * self._BATCH)
            self._end = len(self._hex)
            self._pid = os.getpid()
            at = 0
        self._at = at + 16
        ms = int(self._clock() * 1000)
        if ms > self._ms:
            self._ms, self._seq = ms, 0
        else:  # the same millisecond (or the clock stepped back): after the previous id
            self._seq += 1
            if self._seq > 0xFFFF:  # 65,536 ids in one millisecond: borrow the next one
                self._ms, self._seq = self._ms + 1, 0
        return f"{self._ms:012x}{self._seq:04x}{self._hex[at : at + 16]}"


@dataclass(eq=False)
class Core:
    """What ``build(core)`` gets: the ground-floor parts and the ports (see the module doc)."""

    settings: Settings
    config: GatewayConfig  # the config the app is built with (reloads: ``reconfigure``)
    resources: Resources  # the one owner of Redis, databases, side-service HTTP and MiniLM
    metrics: GatewayMetrics  # the app's registry is ``metrics.registry``
    auth: AuthChain = field(init=False)
    access: AdminAccess = field(init=False)  # admin authentication and audit
    request_ids: RequestIds = field(default_factory=RequestIds)
    ports: Ports = field(default_factory=Ports)
    # Aliases a stage resolves to a configured one (the semantic router's ``auto``).
    virtual_aliases: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.auth = AuthChain(self.settings.master_key)
        self.access = AdminAccess(lambda: self.auth)
