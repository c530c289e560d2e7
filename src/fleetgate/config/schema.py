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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fleetgate.api.responses.config import ResponsesConfig
from fleetgate.batches.config import BatchesConfig
from fleetgate.cache.config import CacheConfig
from fleetgate.mcp.config import McpConfig
from fleetgate.multimodal.config import MultimodalConfig
from fleetgate.releases.config import RegistryRef, ReleasesConfig
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.safety.config import SafetyConfig
from fleetgate.scheduling.config import SchedulingConfig

__all__ = [
    "AliasConfig",
    "AliasLimits",
    "DeploymentConfig",
    "GatewayConfig",
    "HealthConfig",
    "KvAwareConfig",
    "KvEventsConfig",
    "Price",
    "RouterConfig",
    "RoutingConfig",
    "ServerConfig",
    "TenancyConfig",
    "TimeoutConfig",
]

ProviderName = Literal["openai", "azure", "anthropic"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Model):
    """USD per million tokens."""

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    # Prompt tokens the upstream read from its prompt cache (None: the input price).
    cached_input_per_mtok: float | None = Field(None, ge=0)
    # Prompt tokens the upstream wrote to its prompt cache (Anthropic's
    # ``cache_creation_input_tokens``; None: the input price).
    cache_write_input_per_mtok: float | None = Field(None, ge=0)
    # Share of the price taken off requests of the batch lane (0.5: half price).
    batch_discount: float = Field(0.0, ge=0, le=1)


class TimeoutConfig(_Model):
    """Seconds. ``first_token`` bounds the wait for response headers and the first chunk,
    ``idle`` the wait for each later event of a stream, ``total`` the whole exchange."""

    connect: float = Field(5.0, gt=0)
    first_token: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)
    # The most time between two events of a stream; past it the stream ends with an error event.
    idle: float = Field(120.0, gt=0)


class WakeConfig(_Model):
    """A deployment that may be scaled to zero or asleep (vLLM sleep mode): the gateway holds
    its requests for up to ``hold_s`` while it comes up instead of failing them.

    ``sleep_after_idle_s``: put an idle vLLM engine to sleep (``POST /sleep?level=``) after
    this long without requests, and wake it (``POST /wake_up``) for the next one; None: the
    gateway never puts it to sleep (an autoscaler scales it to zero instead).
    """

    hold_s: float = Field(120.0, gt=0)
    poll_interval_s: float = Field(0.5, gt=0)
    sleep_after_idle_s: float | None = Field(None, gt=0)
    sleep_level: Literal[1, 2] = 1


class KvEventsConfig(_Model):
    """Where an engine publishes its KV-cache events (vLLM ``--kv-events-config``): the PUB
    socket (``endpoint``, e.g. ``tcp://10.0.0.5:5557``) and the ROUTER socket that replays
    missed batches (``replay_endpoint``). Read by kv-aware routing (docs/routing.md)."""

    endpoint: str = Field(pattern=r"^(tcp|ipc|inproc)://.+")
    replay_endpoint: str | None = Field(None, pattern=r"^(tcp|ipc|inproc)://.+")
    topic: str = ""


class DeploymentConfig(_Model):
    provider: ProviderName = "openai"
    # The engine behind an OpenAI-compatible deployment; ``auto``: learned from its metrics or
    # its ``/models`` answer. Decides whether it gets a per-tenant ``cache_salt`` (vLLM).
    engine: Literal["auto", "vllm", "sglang", "llamacpp", "other"] = "auto"
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
    # Requests the engine runs at once (vLLM's --max-num-seqs): the scheduler's saturation
    # point for the alias's pool (scheduling/); None: unbounded.
    max_num_seqs: int | None = Field(None, ge=1)
    # The engine schedules by vLLM's request ``priority`` field (--scheduling-policy priority):
    # the scheduler sends each request's band in it.
    priority: bool = False
    # ``native``: requests that came in on /v1/responses are sent to the deployment's own
    # /v1/responses (OpenAI, vLLM); ``bridge``: as chat completions (api/responses).
    responses_api: Literal["bridge", "native"] = "bridge"
    # A `tokenizers` JSON file of the model: the context window is checked with its exact count.
    tokenizer: str | None = None
    price: Price = Price()
    tags: tuple[str, ...] = ()
    timeouts: TimeoutConfig | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/models"
    # Where it runs (``eu-west``): the router prefers the gateway's own ``router.region`` and
    # fails over by ``router.region_failover`` (routing/regions.py); None: in every region.
    region: str | None = Field(None, min_length=1)
    # Scale-to-zero / sleep mode (routing/hold.py): requests wait while it comes up.
    wake: WakeConfig | None = None
    kv_events: KvEventsConfig | None = None

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
        if self.responses_api == "native" and self.provider != "openai":
            raise ValueError("responses_api: native needs provider openai")
        return self

    @property
    def is_local(self) -> bool:
        return "local" in self.tags


class AliasConfig(_Model):
    alias: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._:/@-]+$")
    strategy: str = "weighted"
    fallbacks: tuple[str, ...] = ()
    # Serve the version of a registry model at a stage (docs/releases.md): the deployments
    # come from that version and follow every promotion; ``deployments``, if any, serve only
    # while the stage holds no version.
    registry: RegistryRef | None = None
    deployments: tuple[DeploymentConfig, ...] = Field((), validate_default=True)
    num_retries: int | None = Field(None, ge=0, le=10)
    description: str | None = None
    cache: CacheConfig | None = None  # response caches, opt-in (cache/config.py)

    @field_validator("deployments")
    @classmethod
    def _has_deployments(
        cls, value: tuple[DeploymentConfig, ...], info: ValidationInfo
    ) -> tuple[DeploymentConfig, ...]:
        if not value and info.data.get("registry") is None:
            raise ValueError("needs at least one deployment (or a registry stage to follow)")
        return value

    @property
    def local_only(self) -> bool:
        """All deployments tagged ``local``: never fall back to anything that is not."""
        return bool(self.deployments) and all(d.is_local for d in self.deployments)


class RouterConfig(_Model):
    num_retries: int = Field(2, ge=0, le=10)
    retry_backoff_s: float = Field(0.05, ge=0)
    retry_backoff_max_s: float = Field(1.0, ge=0)
    timeouts: TimeoutConfig = TimeoutConfig()
    # This gateway's region: an alias's deployments there (and those without a region) are
    # picked while any is healthy; then the regions of ``region_failover`` in order, then the
    # rest. None: regions are ignored (docs/operations.md, "Region failover").
    region: str | None = Field(None, min_length=1)
    region_failover: tuple[str, ...] = ()


class HealthConfig(_Model):
    allowed_fails: int = Field(3, ge=1)
    cooldown_s: float = Field(30.0, gt=0)
    probe_interval_s: float = Field(2.0, gt=0)
    probe_timeout_s: float = Field(2.0, gt=0)  # a probe slower than this counts as failed
    # `/health/ready` is 200 when ``any`` (or ``all``) of the aliases that count have a healthy
    # deployment; ``ready_aliases`` (default: every alias) names the ones that count.
    ready_rule: Literal["any", "all"] = "any"
    ready_aliases: tuple[str, ...] = ()


class KvAwareConfig(_Model):
    """Tunables of ``strategy: kv-aware``: the engine's speed, used to turn work into seconds.

    Expected time to first token on a replica = queue wait + uncached prefill + interference
    with its running decodes, each from these numbers (see docs/benchmarks.md, "Routing").
    """

    prefill_ms_per_token: float = Field(0.2, gt=0)
    decode_ms_per_step: float = Field(20.0, ge=0)
    decode_batch_factor: float = Field(0.01, ge=0)
    max_num_batched_tokens: int = Field(8192, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    # Hot-spot guard: a replica with this many more requests than the least loaded one, and
    # ``hotspot_ratio`` times as many, is not picked while another one is below that.
    hotspot_slack: int = Field(8, ge=0)
    hotspot_ratio: float = Field(2.0, ge=1.0)
    # A KV cache fuller than this makes new prompts wait for blocks (or preempt): up to
    # ``kv_full_penalty_s`` is added to the expected TTFT, all of it when the prompt cannot fit.
    kv_high_water: float = Field(0.9, ge=0, lt=1)
    kv_full_penalty_s: float = Field(2.0, ge=0)
    index_block_tokens: int = Field(64, ge=1)
    max_prompt_chars: int = Field(131072, ge=256)
    exact_tokenize: bool = False
    # An engine's KV-event index is trusted again this long after a gap no replay could fill.
    events_resync_s: float = Field(30.0, ge=0)
    # ``strategy: pd-disagg``: prompts shorter than this are served aggregated (one engine).
    pd_min_prompt_tokens: int = Field(2048, ge=1)


class RoutingConfig(_Model):
    """Engine-aware routing: metric scraping, prefix index, affinity, tenant isolation."""

    scrape_interval_s: float = Field(0.1, gt=0, le=60)
    scrape_timeout_s: float = Field(1.0, gt=0)
    affinity_headers: tuple[str, ...] = ("x-session-id", "x-conversation-id")
    affinity_ttl_s: float = Field(600.0, gt=0)
    tenant_isolation: bool = True
    cache_salt: Literal["auto", "always", "never"] = "auto"
    salt_secret: str | None = None
    public_prefixes: tuple[str, ...] = ()
    decision_sample_rate: float = Field(1.0, ge=0, le=1)
    decision_log_size: int = Field(2000, ge=1)
    redis_url: str | None = None
    kv_aware: KvAwareConfig = KvAwareConfig()


class ServerConfig(_Model):
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # A connection that sends no complete request head for this long (an idle keep-alive
    # connection, or a client trickling its headers) is closed.
    idle_timeout_s: float = Field(30.0, gt=0)
    # A request body that has not fully arrived this long after its headers is a 408.
    body_timeout_s: float = Field(30.0, gt=0)
    access_log: bool = True
    # access.log is rotated when a write would take it past this size or its first line is
    # this old (None: never for that reason), keeping this many older files (.1 the newest).
    access_log_max_bytes: int | None = Field(100 * 1024 * 1024, gt=0)
    access_log_max_age_s: float | None = Field(86_400.0, gt=0)
    access_log_backups: int = Field(5, ge=0)
    otel_exporter: Literal["none", "console", "memory", "otlp"] = "none"
    otel_endpoint: str | None = None
    # On SIGTERM/SIGINT the listener closes and requests in flight (streams too) get this long
    # to finish before they are cancelled and the features close. Read at start.
    shutdown_grace_s: float = Field(60.0, ge=0)


class AliasLimits(_Model):
    """Limits of one alias, summed over every caller."""

    rpm: int | None = Field(None, ge=0)
    tpm: int | None = Field(None, ge=0)
    max_parallel: int | None = Field(None, ge=0)


class TenancyConfig(_Model):
    """Teams, keys, limits, spend and audit (``fleetgate.tenancy``).

    ``limiter_failure``: what requests get when Redis is unreachable (``fail_open`` admits them
    unlimited, ``fail_closed`` answers 503). ``alert_webhook`` receives one POST per budget
    threshold crossed (``alert_thresholds``, percent). ``budget_refresh_s``: how often budget
    counters are re-read (and raised to the store's totals after a Redis outage or restart).
    ``spool_fsync``: sync the spend/audit spool to disk every ``spend_flush_interval_s``.
    ``overlap_reserve``: with Redis, send the upstream call while the reservation's round trip
    is in flight when this process saw room enough for it (`fleetgate.tenancy.headroom`); the
    answer is used only once the reservation is granted, and a refusal aborts the call.
    """

    enabled: bool = True
    limiter_failure: Literal["fail_open", "fail_closed"] = "fail_closed"
    alert_webhook: str | None = None
    alert_thresholds: tuple[int, ...] = (50, 80, 100)
    alias_limits: dict[str, AliasLimits] = Field(default_factory=dict)
    redis_prefix: str = "fg:"
    poll_interval_s: float = Field(0.5, gt=0)
    spend_batch_size: int = Field(500, ge=1)
    spend_flush_interval_s: float = Field(0.2, gt=0)
    budget_refresh_s: float = Field(5.0, gt=0)
    spool_fsync: bool = True
    audit_requests: bool = True
    overlap_reserve: bool = True


class GatewayConfig(_Model):
    models: tuple[AliasConfig, ...] = Field(min_length=1)
    router: RouterConfig = RouterConfig()
    health: HealthConfig = HealthConfig()
    server: ServerConfig = ServerConfig()
    tenancy: TenancyConfig = TenancyConfig()
    routing: RoutingConfig = RoutingConfig()
    multimodal: MultimodalConfig = MultimodalConfig()
    semantic: SemanticConfig | None = None  # the intent router (routing/semantic_config.py)
    safety: SafetyConfig | None = None  # guardrails (safety/config.py); absent: no safety stage
    scheduling: SchedulingConfig = SchedulingConfig()  # admission queues (scheduling/config.py)
    releases: ReleasesConfig = ReleasesConfig()  # registry polling, retention, gates
    batches: BatchesConfig = BatchesConfig()  # the Files and Batch APIs (batches/config.py)
    mcp: McpConfig = McpConfig()  # the MCP gateway (mcp/config.py); off without servers
    responses: ResponsesConfig = ResponsesConfig()  # /v1/responses (api/responses/config.py)
    # Config sections of plug-in features (`fleetgate.feature.Feature`), by feature name: each
    # reads its own in ``reconfigure``; a section naming no feature is refused at start-up.
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

    @model_validator(mode="after")
    def _check_semantic(self) -> GatewayConfig:
        if self.semantic is not None:
            self.semantic.check_aliases({m.alias for m in self.models})
        return self

    def alias(self, name: str) -> AliasConfig | None:
        for m in self.models:
            if m.alias == name:
                return m
        return None
