"""The ``mcp:`` config section: what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fleetgate.config.redact import redact_config
from fleetgate.mcp.config import McpConfig

HTTP = {"transport": "http", "url": "http://127.0.0.1:1/mcp"}


def config(**data: Any) -> McpConfig:
    return McpConfig.model_validate(data)


def test_off_without_servers() -> None:
    assert not config().enabled
    assert config(servers={"a": HTTP}).enabled


@pytest.mark.parametrize("name", ["has__sep", "has_underscore", "", "sp ace", "x" * 65])
def test_server_names_keep_tool_names_unambiguous(name: str) -> None:
    with pytest.raises(ValidationError):
        config(servers={name: HTTP})


@pytest.mark.parametrize(
    "server",
    [
        {"transport": "http"},
        {"transport": "stdio"},
        {"transport": "ws", "url": "ws://x"},
        {**HTTP, "price_per_call_usd": -1},
        {**HTTP, "tool_prices_usd": {"t": -0.5}},
    ],
)
def test_a_server_needs_its_transport_fields_and_sane_prices(server: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        config(servers={"a": server})


@pytest.mark.parametrize("path", ["mcp", "/mcp/", "/m cp"])
def test_the_path_is_one_absolute_path(path: str) -> None:
    with pytest.raises(ValidationError):
        config(path=path)


def test_prices_per_tool_override_the_server_price() -> None:
    server = config(servers={"a": {**HTTP, "price_per_call_usd": 0.1, "tool_prices_usd": {"x": 2}}})
    assert server.servers["a"].price_usd("x") == 2
    assert server.servers["a"].price_usd("y") == 0.1


def test_credentials_are_redacted_from_the_shown_config() -> None:
    cfg = config(
        servers={
            "a": {**HTTP, "headers": {"Authorization": "Bearer s3cret"}},
            "b": {"transport": "stdio", "command": "x", "secret_env": {"TOKEN": "s3cret"}},
        }
    )
    assert "s3cret" not in str(redact_config(cfg.model_dump(mode="json")))
