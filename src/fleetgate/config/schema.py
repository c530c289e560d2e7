"""The YAML configuration, validated at load time.

Example::

    models:
      - alias: fast-small
        strategy: least-load
        fallbacks: [smart]
        deployments:
          - provider: openai
            model: tiny
            api_base: http://127.0.0.1:8001/v1
            api_key: ${VLLM_KEY}
            price: {input_per_mtok: 0.10, output_per_mtok: 0.40}
            tags: [local]
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AliasConfig",
    "DeploymentConfig",
    "GatewayConfig",
    "HealthConfig",
    "Price",
    "RouterConfig",
    "ServerConfig",
    "TimeoutConfig",
]

ProviderName = Literal["openai", "azure", "anthropic"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Model):
    """USD per million tokens."""

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0)


class TimeoutConfig(_Model):
    """Seconds. ``first_token`` bounds the wait for response headers and the first chunk."""

    connect: float = Field(5.0, gt=0)
    first_token: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class DeploymentConfig(_Model):
    provider: ProviderName = "openai"
    model: str = Field(min_length=1)
    api_base: str = Field(min_length=1)
    api_key: str | None = None
    api_version: str | None = None  # azure
    azure_deployment: str | None = None  # azure; defaults to `model`
    name: str | None = None
    weight: float = Field(1.0, ge=0)
    version: str = "v1"
    context_window: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)
    price: Price = Price()
    tags: tuple[str, ...] = ()
    timeouts: TimeoutConfig | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/models"

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _azure_needs_version(self) -> DeploymentConfig:
        if self.provider == "azure" and not self.api_version:
            raise ValueError("azure deployments need api_version")
        return self

    @property
    def is_local(self) -> bool:
        return "local" in self.tags


class AliasConfig(_Model):
    alias: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._:/@-]+$")
    strategy: str = "weighted"
    fallbacks: tuple[str, ...] = ()
    deployments: tuple[DeploymentConfig, ...] = Field(min_length=1)
    num_retries: int | None = Field(None, ge=0, le=10)
    description: str | None = None

    @property
    def local_only(self) -> bool:
        """All deployments tagged ``local``: never fall back to anything that is not."""
        return all(d.is_local for d in self.deployments)


class RouterConfig(_Model):
    num_retries: int = Field(2, ge=0, le=10)
    retry_backoff_s: float = Field(0.05, ge=0)
    retry_backoff_max_s: float = Field(1.0, ge=0)
    timeouts: TimeoutConfig = TimeoutConfig()


class HealthConfig(_Model):
    allowed_fails: int = Field(3, ge=1)
    cooldown_s: float = Field(30.0, gt=0)
    probe_interval_s: float = Field(2.0, gt=0)
    probe_timeout_s: float = Field(2.0, gt=0)


class ServerConfig(_Model):
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    access_log: bool = True
    otel_exporter: Literal["none", "console", "memory", "otlp"] = "none"
    otel_endpoint: str | None = None


class GatewayConfig(_Model):
    models: tuple[AliasConfig, ...] = Field(min_length=1)
    router: RouterConfig = RouterConfig()
    health: HealthConfig = HealthConfig()
    server: ServerConfig = ServerConfig()
    # Sections owned by later packages (tenancy, safety, multimodal, ...) are validated there.
    extensions: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_aliases(self) -> GatewayConfig:
        names = [m.alias for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate alias: {', '.join(dupes)}")
        known = set(names)
        for m in self.models:
            for fb in m.fallbacks:
                if fb not in known:
                    raise ValueError(
                        f"alias {m.alias!r}: fallback {fb!r} is not a configured alias"
                    )
                if fb == m.alias:
                    raise ValueError(f"alias {m.alias!r}: falls back to itself")
        return self

    def alias(self, name: str) -> AliasConfig | None:
        for m in self.models:
            if m.alias == name:
                return m
        return None
