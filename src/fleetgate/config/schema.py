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

Why one module: it is the YAML as one declarative schema, read top to bottom: the small models
first, then those that hold them (`DeploymentConfig` holds `Price`, `TimeoutConfig`,
`WakeConfig` and `KvEventsConfig`; `AliasConfig` holds deployments; `GatewayConfig`, last,
holds every section), and each field's `#` comment is its row of docs/config-reference.md
(`fleetgate.cli.reference` reads the comments from this source): one file is the whole
reference a reader checks a key against. The sections mechanism is `config/sectioned.py`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fleetgate.config.sectioned import Sectioned, StrictModel

__all__ = [
    "AliasConfig",
    "AliasLimits",
    "DeploymentConfig",
    "GatewayConfig",
    "HealthConfig",
    "KvAwareConfig",
    "KvEventsConfig",
    "NAME_PATTERN",
    "Price",
    "RegistryRef",
    "RouterConfig",
    "RoutingConfig",
    "ServerConfig",
    "TenancyConfig",
    "TimeoutConfig",
]

ProviderName = Literal["openai", "azure", "anthropic"]

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"  # registry model, version and stage names


class _Model(StrictModel):
    """Every model of the schema: no unknown keys, immutable."""


class Price(_Model):
    """USD per million tokens."""

    # USD per million prompt tokens
    input_per_mtok: float = Field(0.0, ge=0)
    # USD per million completion tokens
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

    # seconds to connect to an upstream
    connect: float = Field(5.0, gt=0)
    # seconds to the response headers and the first streamed event
    first_token: float = Field(60.0, gt=0)
    # seconds for the whole response
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

    # seconds a request waits for the deployment to come up before it fails
    hold_s: float = Field(120.0, gt=0)
    # seconds between readiness checks while it comes up
    poll_interval_s: float = Field(0.5, gt=0)
    # put an idle vLLM engine to sleep after this many seconds without requests (none: never)
    sleep_after_idle_s: float | None = Field(None, gt=0)
    # vLLM sleep level used (1: offload weights, 2: discard them)
    sleep_level: Literal[1, 2] = 1


class KvEventsConfig(_Model):
    """Where an engine publishes its KV-cache events (vLLM ``--kv-events-config``): the PUB
    socket (``endpoint``, e.g. ``tcp://10.0.0.5:5557``) and the ROUTER socket that replays
    missed batches (``replay_endpoint``). Read by kv-aware routing (docs/routing.md)."""

    # the engine's ZMQ PUB socket for KV-cache events, e.g. tcp://10.0.0.5:5557
    endpoint: str = Field(pattern=r"^(tcp|ipc|inproc)://.+")
    # the engine's ZMQ ROUTER socket that replays missed event batches
    replay_endpoint: str | None = Field(None, pattern=r"^(tcp|ipc|inproc)://.+")
    # the ZMQ topic the events are published on (empty: all)
    topic: str = ""


class DeploymentConfig(_Model):
    # `openai` (vLLM, SGLang, llama.cpp, OpenAI), `azure`, `anthropic`
    provider: ProviderName = "openai"
    # The engine behind an OpenAI-compatible deployment; ``auto``: learned from its metrics or
    # its ``/models`` answer. Decides whether it gets a per-tenant ``cache_salt`` (vLLM).
    engine: Literal["auto", "vllm", "sglang", "llamacpp", "other"] = "auto"
    # the upstream's model name (Azure: the deployment name unless `azure_deployment`)
    model: str = Field(min_length=1)
    # e.g. `http://10.0.0.5:8000/v1`; Azure `https://RES.openai.azure.com`; Anthropic
    # `https://api.anthropic.com`
    api_base: str = Field(min_length=1)
    # sent as `Authorization: Bearer` (OpenAI), `api-key` (Azure), `x-api-key` (Anthropic)
    api_key: str | None = None
    # Azure's API version, e.g. 2024-10-21 (required with provider azure)
    api_version: str | None = None
    # Azure's deployment name (default: `model`)
    azure_deployment: str | None = None
    # a name for the deployment in metrics and logs (default: derived from provider, model and
    # api_base)
    name: str | None = None
    # for `weighted`
    weight: float = Field(1.0, ge=0)
    # version label on metrics (canary splits use it)
    version: str = "v1"
    # prompts estimated larger than this (plus `max_tokens`) skip the deployment; estimates are
    # script-aware (about 4 ASCII characters per token, one CJK character per token)
    context_window: int | None = Field(None, gt=0)
    # the most output this deployment writes: a request whose `max_tokens` is larger skips it (and
    # falls back like an oversized prompt)
    max_output_tokens: int | None = Field(None, gt=0)
    # Requests the engine runs at once (vLLM's --max-num-seqs): the scheduler's saturation
    # point for the alias's pool (scheduling/); None: unbounded.
    max_num_seqs: int | None = Field(None, ge=1)
    # Requests this deployment takes in any 60 s (an upstream's quota, LiteLLM's per-deployment
    # `rpm`): at it, the router picks the alias's other deployments, then its fallbacks, then
    # answers 429 with Retry-After. Counted for the fleet (every replica in one Redis window
    # when Redis is configured, tenancy on or off; in process otherwise); None: no cap.
    rpm: int | None = Field(None, ge=1)
    # Tokens this deployment takes in any 60 s (as `rpm`): a request holds its prompt and its
    # `max_tokens` while it runs, then counts its prompt and completion tokens; None: no cap.
    tpm: int | None = Field(None, ge=1)
    # The engine schedules by vLLM's request ``priority`` field (--scheduling-policy priority):
    # the scheduler sends each request's band in it.
    priority: bool = False
    # ``native``: requests that came in on /v1/responses are sent to the deployment's own
    # /v1/responses (OpenAI, vLLM); ``bridge``: as chat completions (api/responses).
    responses_api: Literal["bridge", "native"] = "bridge"
    # A `tokenizers` JSON file of the model: the context window is checked with its exact count.
    tokenizer: str | None = None
    # `input_per_mtok`, `output_per_mtok`, `cached_input_per_mtok` (prompt-cache reads),
    # `cache_write_input_per_mtok` (prompt-cache writes) in USD per million tokens; `batch_discount`
    # (0..1, default 0): the share taken off for lines of the batch lane (0.5: half price)
    price: Price = Price()
    # `local` marks a deployment that never leaves your network: an alias whose deployments are all
    # `local` never falls back to one that is not; `prefill` / `decode` put it in the prefill or
    # decode pool of a `pd-disagg` alias; `encoder` in the alias's encoder pool, which encodes
    # images and answers no request itself (routing.md)
    tags: tuple[str, ...] = ()
    # `connect`, `first_token`, `total` seconds
    timeouts: TimeoutConfig | None = None
    # headers added to every request sent to this deployment
    extra_headers: dict[str, str] = Field(default_factory=dict)
    # probed (GET, relative to `api_base`) while a deployment is cooling down
    health_path: str = "/models"
    # Where it runs (``eu-west``): the router prefers the gateway's own ``router.region`` and
    # fails over by ``router.region_failover`` (routing/regions.py); None: in every region.
    region: str | None = Field(None, min_length=1)
    # Scale-to-zero / sleep mode (routing/hold.py): requests wait while it comes up.
    wake: WakeConfig | None = None
    # `endpoint`, `replay_endpoint`, `topic` of the engine's KV-cache event publisher (vLLM
    # `--kv-events-config`, ZMQ): kv-aware routing uses the blocks the engine reports (routing.md)
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


class RegistryRef(_Model):
    """An alias that serves whatever version of ``model`` is at ``stage`` right now."""

    # the registry model whose versions the alias serves
    model: str = Field(pattern=NAME_PATTERN)
    # the stage followed: the alias serves the version at it right now
    stage: str = Field("production", pattern=NAME_PATTERN)


class AliasConfig(Sectioned):
    """One alias; keys beyond these fields are per-alias feature sections (``cache``)."""

    # the name clients send as `model`
    alias: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._:/@-]+$")
    # `weighted`, `least-load`, `latency` (EWMA of TTFT), `cost`, `round-robin`, `kv-aware`
    strategy: str = "weighted"
    # aliases tried in order when every deployment of this one failed or cannot fit the prompt
    fallbacks: tuple[str, ...] = ()
    # Serve the version of a registry model at a stage (docs/releases.md): the deployments
    # come from that version and follow every promotion; ``deployments``, if any, serve only
    # while the stage holds no version.
    registry: RegistryRef | None = None
    # the upstreams serving the alias (none: only with a registry stage to follow)
    deployments: tuple[DeploymentConfig, ...] = Field((), validate_default=True)
    # attempts on other replicas of this alias before falling back
    num_retries: int | None = Field(None, ge=0, le=10)
    # free text shown in the model list and the console
    description: str | None = None
    # Routes as any alias but is left out of the model list (``/v1/models``, ``/models``):
    # a name kept for old clients (LiteLLM's ``model_group_alias`` ``hidden: true``)
    hidden: bool = False

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

    def deployment_ids(self) -> list[tuple[str, DeploymentConfig]]:
        """Each deployment with the id metrics, spend rows and logs name it by: its ``name``,
        else ``<alias>/<position>``."""
        return [(d.name or f"{self.alias}/{i}", d) for i, d in enumerate(self.deployments)]


class RouterConfig(_Model):
    # further attempts on an alias after a retryable failure (0-10); an alias's own `num_retries`
    # wins
    num_retries: int = Field(2, ge=0, le=10)
    # wait before the first retry, doubled for each next one, jittered (x0.5-1.5)
    retry_backoff_s: float = Field(0.05, ge=0)
    # longest wait between attempts
    retry_backoff_max_s: float = Field(1.0, ge=0)
    # default timeouts of every deployment (a deployment's own `timeouts` override them)
    timeouts: TimeoutConfig = TimeoutConfig()
    # This gateway's region: an alias's deployments there (and those without a region) are
    # picked while any is healthy; then the regions of ``region_failover`` in order, then the
    # rest. None: regions are ignored (docs/operations.md, "Region failover").
    region: str | None = Field(None, min_length=1)
    # the regions to fail over to, in order, when the local one has no healthy deployment; unlisted
    # regions come last, together.
    region_failover: tuple[str, ...] = ()


class HealthConfig(_Model):
    # retryable failures in a row that cool a deployment down (a connection failure does at once)
    allowed_fails: int = Field(3, ge=1)
    # how long a failing deployment gets no traffic, unless a probe brings it back sooner
    cooldown_s: float = Field(30.0, gt=0)
    # how often cooling deployments are probed
    probe_interval_s: float = Field(2.0, gt=0)
    probe_timeout_s: float = Field(2.0, gt=0)  # a probe slower than this counts as failed
    # `/health/ready` is 200 when ``any`` (or ``all``) of the aliases that count have a healthy
    # deployment; ``ready_aliases`` (default: every alias) names the ones that count.
    ready_rule: Literal["any", "all"] = "any"
    # the aliases that count for `/health/ready`; empty: every alias
    ready_aliases: tuple[str, ...] = ()


class KvAwareConfig(_Model):
    """Tunables of ``strategy: kv-aware``: the engine's speed, used to turn work into seconds.

    Expected time to first token on a replica = queue wait + uncached prefill + interference
    with its running decodes, each from these numbers (see docs/results/benchmarks.md, "Routing").
    """

    # the engine's prefill time per uncached prompt token
    prefill_ms_per_token: float = Field(0.2, gt=0)
    # the engine's time for one decode step of one sequence
    decode_ms_per_step: float = Field(20.0, ge=0)
    # how much each further running sequence lengthens a step
    decode_batch_factor: float = Field(0.01, ge=0)
    # the engine's tokens per scheduler step (vLLM's `--max-num-batched-tokens`): prefills are
    # chunked by it
    max_num_batched_tokens: int = Field(8192, ge=1)
    # the engine's concurrent sequences (vLLM's `--max-num-seqs`)
    max_num_seqs: int = Field(256, ge=1)
    # Hot-spot guard: a replica with this many more requests than the least loaded one, and
    # ``hotspot_ratio`` times as many, is not picked while another one is below that.
    hotspot_slack: int = Field(8, ge=0)
    # and times the least loaded replica's load
    hotspot_ratio: float = Field(2.0, ge=1.0)
    # A KV cache fuller than this makes new prompts wait for blocks (or preempt): up to
    # ``kv_full_penalty_s`` is added to the expected TTFT, all of it when the prompt cannot fit.
    kv_high_water: float = Field(0.9, ge=0, lt=1)
    # seconds added to the expected TTFT of an engine whose KV cache is full (scaled from the
    # high-water mark to full; all of it when the prompt does not fit the free blocks)
    kv_full_penalty_s: float = Field(2.0, ge=0)
    # tokens per block of the prefix index
    index_block_tokens: int = Field(64, ge=1)
    # characters of a prompt that are indexed
    max_prompt_chars: int = Field(131072, ge=256)
    # index the engine's token ids (`/tokenize`) instead of text blocks
    exact_tokenize: bool = False
    # An engine's KV-event index is trusted again this long after a gap no replay could fill.
    events_resync_s: float = Field(30.0, ge=0)
    # ``strategy: pd-disagg``: prompts shorter than this are served aggregated (one engine).
    pd_min_prompt_tokens: int = Field(2048, ge=1)


class RoutingConfig(_Model):
    """Engine-aware routing: metric scraping, prefix index, affinity, tenant isolation."""

    # how often each engine's `/metrics` is scraped (at most 60)
    scrape_interval_s: float = Field(0.1, gt=0, le=60)
    # time limit of one scrape, and of a `/tokenize` call with `exact_tokenize`
    scrape_timeout_s: float = Field(1.0, gt=0)
    # request headers naming a session, tried in order, for session affinity
    affinity_headers: tuple[str, ...] = ("x-session-id", "x-conversation-id")
    # how long a session stays tied to its engine after its last turn
    affinity_ttl_s: float = Field(600.0, gt=0)
    # index prefixes and salt the engine cache per tenant
    tenant_isolation: bool = True
    # send vLLM's per-tenant `cache_salt`, whatever the alias's strategy: `auto` (to engines known
    # to be vLLM: `deployments[].engine: vllm`, their scraped metrics, or their `/models` answer),
    # `always` (every OpenAI-compatible deployment), `never`; a caller's own `cache_salt` is
    # replaced by an HMAC of tenant and salt
    cache_salt: Literal["auto", "always", "never"] = "auto"
    # HMAC key of the per-tenant salts; none: the master key (replicas must share it)
    salt_secret: str | None = None
    # prompt beginnings (system prompts) cached and indexed for every tenant together
    public_prefixes: tuple[str, ...] = ()
    # share of decisions kept in the decision log (all are counted in metrics)
    decision_sample_rate: float = Field(1.0, ge=0, le=1)
    # decisions kept per process
    decision_log_size: int = Field(2000, ge=1)
    # Redis through which gateway replicas share in-flight counts and prefix records
    redis_url: str | None = None
    # tunables of `strategy: kv-aware` (the engine's speed)
    kv_aware: KvAwareConfig = KvAwareConfig()


class ServerConfig(_Model):
    # largest request body accepted (413 beyond)
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # A connection that sends no complete request head for this long (an idle keep-alive
    # connection, or a client trickling its headers) is closed.
    idle_timeout_s: float = Field(30.0, gt=0)
    # A request body that has not fully arrived this long after its headers is a 408.
    body_timeout_s: float = Field(30.0, gt=0)
    # write one line per request to access.log in the data dir
    access_log: bool = True
    # access.log is rotated when a write would take it past this size or its first line is
    # this old (None: never for that reason), keeping this many older files (.1 the newest).
    access_log_max_bytes: int | None = Field(100 * 1024 * 1024, gt=0)
    # rotate access.log when its first line is this old (none: never for age)
    access_log_max_age_s: float | None = Field(86_400.0, gt=0)
    # rotated access logs kept (.1 the newest)
    access_log_backups: int = Field(5, ge=0)
    # where GenAI trace spans go: none, console, memory (tests) or otlp
    otel_exporter: Literal["none", "console", "memory", "otlp"] = "none"
    # the OTLP collector's endpoint, with `otel_exporter: otlp`
    otel_endpoint: str | None = None
    # On SIGTERM/SIGINT the listener closes and requests in flight (streams too) get this long
    # to finish before they are cancelled and the features close. Read at start.
    shutdown_grace_s: float = Field(60.0, ge=0)


class AliasLimits(_Model):
    """Limits of one alias, summed over every caller."""

    # requests per minute to the alias from all callers (none: unlimited)
    rpm: int | None = Field(None, ge=0)
    # tokens per minute to the alias from all callers (none: unlimited)
    tpm: int | None = Field(None, ge=0)
    # requests to the alias in flight at once (none: unlimited)
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

    # teams, keys, limits, spend and audit; off: only the master key is accepted
    enabled: bool = True
    # with Redis unreachable: fail_open admits requests unlimited, fail_closed answers 503
    limiter_failure: Literal["fail_open", "fail_closed"] = "fail_closed"
    # URL that receives one POST per budget threshold crossed
    alert_webhook: str | None = None
    # budget percentages whose crossing is alerted
    alert_thresholds: tuple[int, ...] = (50, 80, 100)
    # limits of each alias, summed over every caller, by alias
    alias_limits: dict[str, AliasLimits] = Field(default_factory=dict)
    # prefix of every Redis key the limiter and caches write (read at start)
    redis_prefix: str = "fg:"
    # seconds between polls of the store for key and team changes
    poll_interval_s: float = Field(0.5, gt=0)
    # spend and audit rows written to the store in one batch
    spend_batch_size: int = Field(500, ge=1)
    # seconds between writes of the spend and audit spool to the store
    spend_flush_interval_s: float = Field(0.2, gt=0)
    # seconds between re-reads of budget counters (raised to the store's totals after a Redis
    # outage)
    budget_refresh_s: float = Field(5.0, gt=0)
    # sync the spend and audit spool to disk at every flush
    spool_fsync: bool = True
    # record an audit row for every request
    audit_requests: bool = True
    # send the upstream call while the Redis reservation is in flight when this process saw room for
    # it
    overlap_reserve: bool = True


class GatewayConfig(Sectioned):
    """The whole config: the ground-floor sections below; every other top-level key is a
    feature's section (``safety:``, ``batches:``), kept raw in ``sections`` and read through
    the feature's declaration (`fleetgate.config.sections.Section`)."""

    models: tuple[AliasConfig, ...] = Field(min_length=1)
    router: RouterConfig = RouterConfig()
    health: HealthConfig = HealthConfig()
    server: ServerConfig = ServerConfig()
    tenancy: TenancyConfig = TenancyConfig()
    routing: RoutingConfig = RoutingConfig()
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

    def alias(self, name: str) -> AliasConfig | None:
        for m in self.models:
            if m.alias == name:
                return m
        return None
