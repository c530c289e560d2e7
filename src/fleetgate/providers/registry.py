"""Provider families by name; built-ins register the same way a plug-in would."""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.config.schema import DeploymentConfig
from fleetgate.errors import ConfigError
from fleetgate.providers.base import Provider
from fleetgate.providers.transport import HttpClient

__all__ = ["ProviderRegistry"]

ProviderClass = Callable[[DeploymentConfig, HttpClient], Provider]


class ProviderRegistry:
    """``provider:`` names in the config → provider classes."""

    def __init__(self, http: HttpClient) -> None:
        self.http = http
        self._classes: dict[str, ProviderClass] = {}

    def register(self, name: str, cls: ProviderClass) -> None:
        self._classes[name] = cls

    def create(self, config: DeploymentConfig) -> Provider:
        cls = self._classes.get(config.provider)
        if cls is None:
            raise ConfigError(f"unknown provider {config.provider!r}")
        return cls(config, self.http)

    @classmethod
    def with_builtins(cls, http: HttpClient) -> ProviderRegistry:
        from fleetgate.providers.openai import AzureOpenAIProvider, OpenAIProvider

        registry = cls(http)
        registry.register("openai", OpenAIProvider)
        registry.register("azure", AzureOpenAIProvider)
        registry.register("anthropic", _anthropic)
        return registry


def _anthropic(config: DeploymentConfig, http: HttpClient) -> Provider:
    from fleetgate.providers.anthropic import AnthropicProvider

    return AnthropicProvider(config, http)
