"""The ``multimodal:`` section of the gateway config.

Example (YAML)::

    multimodal:
      images:
        fetch: {allow_cidrs: ["10.20.0.0/16"], max_bytes: 10000000, timeout_s: 5}
        max_pixels: 1003520
        token_family: qwen2-vl
        cache: {max_bytes: 268435456, tenant_quota_bytes: 33554432}
        budget: {tokens_in_flight: 8192, max_images_per_request: 5,
                 per_deployment: {vl-a: 4096}}
      asr: {backend: pocketsphinx}  # or {backend: openai, url: http://whisper/v1, model: ...}
      tts: {backend: espeak}  # or {backend: openai, url: ..., model: ...}
      conversations: {enabled: true}
      inputs: {upload_bytes: 33554432, audio_samples: 28800000}  # see fleetgate.multimodal.budgets
      prompts:
        assistant: {system_prompt: "You are ACME's assistant.", context_window: 8192}
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetgate.config.sections import Section
from fleetgate.multimodal.budgets import InputBudget
from fleetgate.multimodal.prompt.config import PromptConfig

__all__ = [
    "MULTIMODAL_SECTION",
    "AsrConfig",
    "ConversationConfig",
    "ImageBudgetConfig",
    "ImageCacheConfig",
    "ImageConfig",
    "ImageFetchConfig",
    "InputBudget",
    "MultimodalConfig",
    "TtsConfig",
]

TokenFamily = Literal["qwen2-vl", "llava", "openai", "anthropic"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageFetchConfig(_Model):
    """Remote image fetching. Private, loopback and link-local addresses are refused unless a
    CIDR in ``allow_cidrs`` covers them (checked again after every redirect and DNS lookup)."""

    # also fetch `http://` image URLs
    allow_http: bool = False
    # private networks images may be fetched from, e.g. `10.20.0.0/16`
    allow_cidrs: tuple[str, ...] = ()
    # ports image URLs may use; none: any
    allowed_ports: tuple[int, ...] | None = None
    # largest image body fetched
    max_bytes: int = Field(20 * 1024 * 1024, gt=0)
    # time limit of one fetch, redirects included
    timeout_s: float = Field(10.0, gt=0)
    # redirects followed
    max_redirects: int = Field(3, ge=0)


class ImageCacheConfig(_Model):
    """Processed-image cache: memory LRU with a byte cap and a per-tenant guaranteed share, and
    an optional disk tier with per-tenant files and shares of its own."""

    # memory of the processed-image cache
    max_bytes: int = Field(256 * 1024 * 1024, gt=0)
    # cache share each tenant keeps against the others
    tenant_quota_bytes: int = Field(32 * 1024 * 1024, gt=0)
    # directory of a second, on-disk cache tier
    disk_dir: str | None = None
    # size of the disk tier
    max_disk_bytes: int = Field(1 << 30, gt=0)
    tenant_disk_quota_bytes: int = Field(128 * 1024 * 1024, gt=0)  # each tenant's disk share


class ImageBudgetConfig(_Model):
    """Image compute budget: a per-request cap and image tokens in flight per deployment
    (keyed by deployment id, the ``name`` in the alias config). ``enabled: false`` keeps the
    per-request cap but admits every request at once. A request waits at most
    ``queue_timeout_s`` for admission, then gets 429."""

    # admit image requests per deployment; `false` keeps only the per-request cap
    enabled: bool = True
    # more images in one request is a 400 `too_many_images`
    max_images_per_request: int = Field(8, ge=0)
    # image tokens a deployment encodes at once
    tokens_in_flight: int = Field(16384, gt=0)
    # the budget per deployment `name`, where it differs
    per_deployment: dict[str, int] = Field(default_factory=dict)
    # longest wait for admission, then 429 `image_budget_busy`
    queue_timeout_s: float = Field(60.0, gt=0)


class ImageConfig(_Model):
    # how image URLs are fetched
    fetch: ImageFetchConfig = ImageFetchConfig()
    # larger images are shrunk to this many pixels
    max_pixels: int = Field(1024 * 1024, gt=0)
    max_decode_pixels: int = Field(40_000_000, gt=0)  # deprecated: inputs.image_pixels
    decode_workers: int = Field(2, ge=1)  # processes decoding images (at most this many at once)
    # re-encoding: `auto` (JPEG stays JPEG unless it has alpha, the rest PNG), `png`, `jpeg`
    output_format: Literal["auto", "png", "jpeg"] = "auto"
    # JPEG quality when re-encoding (1-100)
    jpeg_quality: int = Field(90, ge=1, le=100)
    # how image tokens are estimated: `qwen2-vl`, `llava`, `openai`, `anthropic`
    token_family: TokenFamily = "qwen2-vl"
    # the family per alias, where it differs
    token_family_per_alias: dict[str, TokenFamily] = Field(default_factory=dict)
    # the cache of decoded images (memory and disk)
    cache: ImageCacheConfig = ImageCacheConfig()
    # the image decoding budget per request, process and Redis
    budget: ImageBudgetConfig = ImageBudgetConfig()
    # prefer the replica that recently encoded the same images
    affinity: bool = True
    # how long an image counts as encoded on a replica
    affinity_ttl_s: float = Field(600.0, gt=0)


class _Backend(_Model):
    # the upstream's base URL; required with `openai`
    url: str | None = None
    # the upstream's model; required with `openai`
    model: str | None = None
    # sent to the upstream as a bearer token
    api_key: str | None = None
    # requests to the upstream at once
    concurrency: int = Field(8, ge=1)
    # time limit of one upstream request, or of one phrase in a worker process
    timeout_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _url_for_openai(self) -> _Backend:
        if getattr(self, "backend", None) == "openai" and not (self.url and self.model):
            raise ValueError("backend 'openai' needs url and model")
        return self


class AsrConfig(_Backend):
    """Speech recognition: the embedded pocketsphinx, or an OpenAI-compatible upstream."""

    # speech recognition: `pocketsphinx` (embedded) or `openai` (an upstream)
    backend: Literal["pocketsphinx", "openai"] = "pocketsphinx"
    price_per_minute_usd: float | None = Field(None, ge=0)  # billed per minute of audio
    # pocketsphinx worker processes (they also decode uploads)
    workers: int = Field(2, ge=1)
    # Transcriptions of one key waiting for a worker (past it: 429); turns go round-robin.
    max_waiting_per_key: int = Field(4, ge=1)
    max_bytes: int = Field(25 * 1024 * 1024, gt=0)  # deprecated: inputs.audio_bytes
    max_seconds: float = Field(600.0, gt=0)  # deprecated: inputs.audio_seconds


class TtsConfig(_Backend):
    """Speech synthesis: the embedded espeak-ng, or an OpenAI-compatible upstream.

    ``native_audio_aliases``: aliases whose upstream speaks ``modalities: ["text","audio"]``
    itself; for every other alias the gateway strips those fields and synthesises the audio.
    """

    # speech synthesis: `espeak` (embedded espeak-ng) or `openai` (an upstream)
    backend: Literal["espeak", "openai"] = "espeak"
    workers: int = Field(1, ge=1)  # espeak worker processes
    price_per_mchars_usd: float | None = Field(None, ge=0)  # billed per million characters
    # phrases of one reply synthesised at once
    max_concurrency: int = Field(4, ge=1)
    # longest `input` of `/v1/audio/speech`
    max_input_chars: int = Field(4096, ge=1)
    # aliases whose upstream produces audio itself (fields passed through)
    native_audio_aliases: tuple[str, ...] = ()


class ConversationConfig(_Model):
    """Stored conversations (``x-conversation-id``) in the gateway database."""

    # store conversations named by `x-conversation-id`
    enabled: bool = False
    max_history_turns: int = Field(200, ge=1)  # also the turns a conversation keeps stored
    max_per_owner: int = Field(1000, ge=1)  # conversations kept per owner; the oldest go first
    # Who may continue a conversation: ``user`` (the key's user, else the key itself) or
    # ``team`` (every key of the team shares the team's conversation ids).
    scope: Literal["user", "team"] = "user"


class MultimodalConfig(_Model):
    """Images, speech in and out, conversations and prompt assembly (``fleetgate.multimodal``).

    ``prompts`` maps an alias to its prompt assembly (system prompt, profile, retrieval,
    history window); aliases without one get history-only assembly when a conversation id is
    sent, and are otherwise passed through.
    """

    # the stage, the audio and document routes; `false`: requests pass through as sent
    enabled: bool = True
    # image inputs: fetching, decoding, caching and budgets
    images: ImageConfig = ImageConfig()
    # speech to text (`/v1/audio/transcriptions`, audio inputs)
    asr: AsrConfig = AsrConfig()
    # text to speech (`/v1/audio/speech`)
    tts: TtsConfig = TtsConfig()
    # stored conversations: their limits and retention
    conversations: ConversationConfig = ConversationConfig()
    # size limits of uploads, audio, images and documents
    inputs: InputBudget = InputBudget()
    # prompt assembly per alias
    prompts: dict[str, PromptConfig] = Field(default_factory=dict)
    # Who may ask for ``x-fleetgate-debug: prompt`` (the assembled prompt, with the operator's
    # system prompt, retrieved documents and history): the master key, or team admins as well.
    prompt_debug: Literal["master", "admins", "off"] = "master"

    @model_validator(mode="after")
    def _older_limit_fields(self) -> MultimodalConfig:
        # asr.max_bytes, asr.max_seconds and images.max_decode_pixels predate `inputs`: set
        # alone, they still apply.
        older = {
            "audio_bytes": (self.asr, "max_bytes"),
            "audio_seconds": (self.asr, "max_seconds"),
            "image_pixels": (self.images, "max_decode_pixels"),
        }
        update = {
            field: getattr(section, name)
            for field, (section, name) in older.items()
            if name in section.model_fields_set and field not in self.inputs.model_fields_set
        }
        if not update:
            return self
        inputs = InputBudget.model_validate({**self.inputs.model_dump(), **update})
        return self.model_copy(update={"inputs": inputs})


MULTIMODAL_SECTION = Section(
    "multimodal",
    MultimodalConfig,
    reload={"": "restart"},  # its stage and processors: at start
)
"""The ``multimodal`` section: images, audio and prompt assembly."""
