"""Azure OpenAI URL and header helpers."""

from __future__ import annotations

from typing import get_args

import pytest

from fleetgate.contract.request import Endpoint
from fleetgate.errors import ConfigError
from fleetgate.providers.azure_openai import AZURE_ENDPOINTS, azure_headers, azure_url
from fleetgate.providers.base import RoutedEndpoint


@pytest.mark.parametrize(
    "base",
    [
        "https://res.openai.azure.com",
        "https://res.openai.azure.com/",
        "https://res.openai.azure.com/openai/",
    ],
)
def test_url_for_each_base_spelling(base: str) -> None:
    assert (
        azure_url(base, "gpt-4o", "chat/completions", "2024-10-21")
        == "https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
    )


def test_embeddings_and_completions_and_quoting() -> None:
    assert azure_url("https://r.openai.azure.com", "emb", "embeddings", "2024-06-01").endswith(
        "/openai/deployments/emb/embeddings?api-version=2024-06-01"
    )
    assert "/deployments/my%2Fdep/completions?" in azure_url(
        "https://r.openai.azure.com", "my/dep", "completions", "v"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("res.openai.azure.com", "d", "chat/completions", "v"),
        ("https://r", "", "chat/completions", "v"),
        ("https://r", "d", "images", "v"),
        ("https://r", "d", "embeddings", ""),
    ],
)
def test_bad_configuration_is_a_config_error(args: tuple[str, str, str, str]) -> None:
    with pytest.raises(ConfigError):
        azure_url(*args)  # type: ignore[arg-type]


def test_key_goes_in_api_key_header_not_authorization() -> None:
    assert azure_headers("secret") == {"api-key": "secret"}
    assert azure_headers(ad_token="tok") == {"Authorization": "Bearer tok"}
    with pytest.raises(ConfigError):
        azure_headers()
    with pytest.raises(ConfigError):
        azure_headers("a", ad_token="b")


def test_every_routed_endpoint_has_an_azure_path() -> None:
    # AzureOpenAIProvider.url passes the values of the endpoints a provider is sent
    # (RoutedEndpoint) to azure_url, which refuses unknown ones.
    routed: tuple[Endpoint, ...] = get_args(RoutedEndpoint)
    assert {Endpoint.CHAT, Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS} <= set(routed)
    assert {endpoint.value for endpoint in routed} <= set(AZURE_ENDPOINTS)
