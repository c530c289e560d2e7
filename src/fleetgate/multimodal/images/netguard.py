"""Which network addresses an image fetch may connect to.

Private, loopback, link-local, multicast, reserved and unspecified addresses (IPv4 and IPv6,
IPv4-mapped IPv6 included) are refused unless an allow-listed CIDR covers them. The check runs on
the *resolved* address that the connection then uses, so DNS cannot be re-pointed in between.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from fleetgate.errors import InvalidRequest

__all__ = ["AddressPolicy", "GuardedResolver", "IPAddress"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressPolicy:
    """Decides whether an IP address is a public destination or an allow-listed private one.

    Example::

        policy = AddressPolicy(allow_cidrs=["10.20.0.0/16"])
        policy.is_allowed(ipaddress.ip_address("10.20.1.5"))   # True
        policy.is_allowed(ipaddress.ip_address("127.0.0.1"))   # False
    """

    def __init__(self, allow_cidrs: Iterable[str] = ()) -> None:
        self._allowed: tuple[_Network, ...] = tuple(
            ipaddress.ip_network(c, strict=False) for c in allow_cidrs
        )

    def is_allowed(self, address: IPAddress) -> bool:
        """True when ``address`` is public, or private but inside an allow-listed CIDR."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            mapped = address.ipv4_mapped
            if any(mapped in net for net in self._allowed):
                return True
            return self.is_allowed(mapped)
        if any(address in net for net in self._allowed):
            return True
        return not _is_special(address)

    def check(self, address: IPAddress, *, param: str | None = None) -> None:
        """Raise :class:`InvalidRequest` when ``address`` may not be fetched from."""
        if not self.is_allowed(address):
            raise InvalidRequest(
                f"image URL resolves to a non-public address ({address}); refused",
                param=param,
            )


def _is_special(address: IPAddress) -> bool:
    if (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    ):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        # 6to4 and Teredo embed IPv4 addresses; refuse when the embedded one is special.
        embedded = address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None and _is_special(embedded):
            return True
        return address.is_site_local
    # Carrier-grade NAT (100.64/10) is "shared", not private, in the ipaddress module.
    return address in ipaddress.IPv4Network("100.64.0.0/10")


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (``[::1]`` brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that resolves once and only returns addresses the policy allows.

    aiohttp connects to exactly the addresses returned here, so the check and the connection
    use the same resolution (no time-of-check/time-of-use gap through DNS rebinding). If *any*
    resolved address is refused the whole name is refused, so a round-robin record cannot
    smuggle a private address in.
    """

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver, param: str | None) -> None:
        self._policy = policy
        self._inner = inner
        self._param = param

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        literal = parse_ip_literal(host)
        if literal is not None:
            self._policy.check(literal, param=self._param)
        try:
            results = await self._inner.resolve(host, port, family)
        except OSError as exc:
            raise InvalidRequest(
                f"image URL host {host!r} could not be resolved", param=self._param
            ) from exc
        checked = _check_all(self._policy, results, self._param)
        if not checked:
            raise InvalidRequest(f"image URL host {host!r} has no addresses", param=self._param)
        return checked

    async def close(self) -> None:
        await self._inner.close()


def _check_all(
    policy: AddressPolicy, results: Sequence[ResolveResult], param: str | None
) -> list[ResolveResult]:
    out: list[ResolveResult] = []
    for result in results:
        raw: Any = result["host"]
        address = parse_ip_literal(str(raw))
        if address is None:
            raise InvalidRequest("image URL resolved to an unparsable address", param=param)
        policy.check(address, param=param)
        out.append(result)
    return out
