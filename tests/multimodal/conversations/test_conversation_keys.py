"""Who owns a conversation: the names a key, a JWT and an OIDC sign-in act under."""

from __future__ import annotations

from fleetgate.contract.principal import Principal
from fleetgate.multimodal.conversation import conversation_key, conversation_owner
from fleetgate.tenancy.model import jwt_key_id


def test_a_key_bound_to_a_name_never_owns_an_identity_providers_subject() -> None:
    """A virtual key's user and a JWT's or an OIDC sign-in's subject are separate names, even
    when the strings are equal: neither continues the other's conversations."""
    key = Principal("key_1", team_id="t", user_id="alice")
    jwt = Principal(jwt_key_id("t"), team_id="t", user_id="alice")
    oidc = Principal("oidc:alice", team_id="t", user_id="alice")
    owners = {conversation_owner(p, "user") for p in (key, jwt, oidc)}
    assert len(owners) == 3
    keys = {conversation_key("t", "c1", owner) for owner in owners}
    assert len(keys) == 3
    assert conversation_owner(key, "team") is None  # the team shares its conversations
