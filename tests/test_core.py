"""`fleetgate.core`: typed ports features meet by, and the authenticator chain."""

from __future__ import annotations

import pytest

from fleetgate.contract.principal import Principal
from fleetgate.core import AuthChain, Port, Ports
from fleetgate.errors import AuthenticationFailed

COUNT: Port[int] = Port("count")


class Fixed:
    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        self.asked: list[str] = []

    def authenticate(self, token: str) -> Principal:
        self.asked.append(token)
        return Principal(key_id=self.key_id, role="user")


def test_a_port_is_provided_once_and_read_by_its_typed_name() -> None:
    ports = Ports()
    assert ports.get(COUNT) is None and COUNT not in ports
    with pytest.raises(RuntimeError, match="count is not provided"):
        ports.require(COUNT)
    assert ports.provide(COUNT, 3) == 3
    assert ports.get(COUNT) == 3 and ports.require(COUNT) == 3
    with pytest.raises(RuntimeError, match="already provided"):
        ports.provide(COUNT, 4)  # two providers of one part: a wiring error at build time


def test_the_chain_asks_the_master_key_then_claimed_tokens_then_the_catch_all() -> None:
    chain = AuthChain("sk-master")
    with pytest.raises(AuthenticationFailed):
        chain.authenticate("sk-team")  # nothing added: only the master key
    keys, jwt = Fixed("key"), Fixed("jwt")
    chain.add(keys)
    chain.add(jwt, claims=lambda token: token.startswith("eyJ"))  # added later, asked first
    assert chain.authenticate("sk-master").is_master
    assert chain.authenticate("eyJ.a.b").key_id == "jwt"
    assert chain.authenticate("sk-team").key_id == "key"
    assert keys.asked == ["sk-team"] and jwt.asked == ["eyJ.a.b"]
    with pytest.raises(AuthenticationFailed):
        chain.authenticate("sk-\udcff")  # not a printable ASCII key: no authenticator sees it
    with pytest.raises(RuntimeError, match="catch-all"):
        chain.add(Fixed("second"))
