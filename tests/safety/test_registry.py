"""The check registry builds an HTTP check only on the process's outbound session: a check
never opens a session of its own."""

from __future__ import annotations

import pytest

from fleetgate.errors import ConfigError
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.config import CheckConfig
from fleetgate.safety.registry import builtin_registry
from tests.resources.support import outbound

__all__ = ["outbound"]

GUARDS = {
    "llama_guard": {"base_url": "http://guard:8000/v1", "model": "lg"},
    "qwen3guard": {"base_url": "http://guard:8000/v1", "model": "q"},
    "policy_guard": {"base_url": "http://guard:8000/v1", "model": "p", "policy": "p"},
    "moderation": {"base_url": "http://guard:8000/v1"},
}


@pytest.mark.parametrize("kind", sorted(GUARDS))
def test_an_http_check_without_the_owners_session_is_a_config_error(kind: str) -> None:
    with pytest.raises(ConfigError, match=rf"safety.checks.g: a {kind} check calls a service"):
        builtin_registry().create("g", CheckConfig(type=kind, options=GUARDS[kind]))


@pytest.mark.parametrize("kind", sorted(GUARDS))
def test_an_http_check_is_built_on_the_owners_session(kind: str, outbound: OutboundHttp) -> None:
    check = builtin_registry(http=outbound).create(
        "g", CheckConfig(type=kind, options=GUARDS[kind])
    )
    assert check.name == "g" and outbound.sessions_opened == 0  # nothing opened at build
