"""`MultimodalRuntime`: the multimodal parts built from the ``multimodal:`` config section.

One per app: the image pipeline (fetcher, processor, cache), compute budget (in Redis, shared by
every process, when ``settings.redis_url`` is set; otherwise per process), image affinity,
the speech backends (created on first use, so a gateway that never sees audio never loads a
recogniser; their native libraries run in supervised worker processes), the input limits
(``inputs``), the conversation store and the prompt assemblers. ``start``/``aclose`` run in the
app's lifespan. The database, the side-service HTTP session (remote ASR/TTS) and the MiniLM
model come from the process's `fleetgate.resources.Resources`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fleetgate.config.settings import Settings
from fleetgate.multimodal.audio.asr import PocketsphinxTranscriber, SegmentTranscriber
from fleetgate.multimodal.audio.openai_asr import OpenAITranscriber
from fleetgate.multimodal.audio.prepare import AudioPreparer, IsolatedAudioDecoder
from fleetgate.multimodal.audio.transcribe import Transcriber
from fleetgate.multimodal.config import AsrConfig, MultimodalConfig, TtsConfig
from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.document_kv import DocumentKv
from fleetgate.multimodal.fair import FairShare
from fleetgate.multimodal.images.affinity import ImageAffinity
from fleetgate.multimodal.images.budget import ImageBudget, ImageComputeBudget
from fleetgate.multimodal.images.cache import ProcessedImageCache
from fleetgate.multimodal.images.fetch import FetchPolicy, ImageFetcher
from fleetgate.multimodal.images.isolated import IsolatedImageProcessor
from fleetgate.multimodal.images.pipeline import ImagePipeline
from fleetgate.multimodal.images.process import ProcessingParams
from fleetgate.multimodal.images.shared_budget import SharedImageBudget
from fleetgate.multimodal.prompt.assembler import PromptAssembler
from fleetgate.multimodal.prompt.config import PromptConfig
from fleetgate.multimodal.prompt.documents import DOCUMENTS_KIND, DocumentStore
from fleetgate.multimodal.prompt.retrieval import DocumentIndex
from fleetgate.multimodal.speech.espeak import EspeakSynthesizer
from fleetgate.multimodal.speech.openai_tts import OpenAISynthesizer
from fleetgate.multimodal.speech.tts import FairSynthesizer, SpeechSynthesizer
from fleetgate.multimodal.upstream import SideServiceClient
from fleetgate.resources import MiniLMEmbedder, Resources
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.telemetry.registry import Registry

__all__ = ["MultimodalRuntime"]

_Client = TypeVar("_Client", bound=SideServiceClient)


def _upstream(kind: type[_Client], backend: AsrConfig | TtsConfig, http: OutboundHttp) -> _Client:
    """The client of ``backend``'s OpenAI-compatible upstream (``backend: openai``)."""
    assert backend.url is not None and backend.model is not None  # the config checks both
    return kind(
        backend.url,
        model=backend.model,
        api_key=backend.api_key,
        concurrency=backend.concurrency,
        timeout_s=backend.timeout_s,
        http=http,
    )


def _fetch_policy(config: MultimodalConfig) -> FetchPolicy:
    f = config.images.fetch
    return FetchPolicy(
        allow_http=f.allow_http,
        allow_cidrs=list(f.allow_cidrs),
        allowed_ports=list(f.allowed_ports) if f.allowed_ports is not None else None,
        max_bytes=f.max_bytes,
        timeout_s=f.timeout_s,
        max_redirects=f.max_redirects,
    )


class MultimodalRuntime:
    """Everything the multimodal stage, the stream filters and the audio routes share.

    Example::

        section = MULTIMODAL_SECTION.of(config)
        runtime = MultimodalRuntime(section, settings, registry, resources=resources)
        await runtime.start()
        stage = MultimodalStage(runtime, table_config)
        ...
        await runtime.aclose()
    """

    def __init__(
        self,
        config: MultimodalConfig,
        settings: Settings,
        registry: Registry | None = None,
        *,
        resources: Resources,
        redis_prefix: str = "fg:",
    ) -> None:
        """``resources``: the process's shared owner (which closes what it holds after the
        runtime's `aclose`). ``redis_prefix``: the start of the Redis keys of the shared
        image budget (the gateway passes ``tenancy.redis_prefix``)."""
        self.config = config
        self.settings = settings
        self.resources = resources
        registry = registry or Registry()
        self.inputs = config.inputs
        self._worker_failures = registry.counter(
            "fleetgate_native_worker_failures_total",
            "Native worker processes lost (crashed, timed out or failed to start); each cost "
            "the call it was running.",
            ["pool", "reason"],
        )
        img = config.images
        self.fetcher = ImageFetcher(_fetch_policy(config))
        self.processor = IsolatedImageProcessor(
            ProcessingParams(
                max_pixels=img.max_pixels,
                max_decode_pixels=config.inputs.image_pixels,
                output_format=img.output_format,
                jpeg_quality=img.jpeg_quality,
            ),
            workers=img.decode_workers,
            on_failure=self._worker_failed,
        )
        self.cache = ProcessedImageCache(
            max_bytes=img.cache.max_bytes,
            tenant_quota_bytes=img.cache.tenant_quota_bytes,
            disk_dir=img.cache.disk_dir,
            max_disk_bytes=img.cache.max_disk_bytes,
            tenant_disk_quota_bytes=img.cache.tenant_disk_quota_bytes,
            registry=registry,
        )
        self.images = ImagePipeline(
            self.fetcher,
            self.processor,
            self.cache,
            registry=registry,
            share=FairShare("image decoding", capacity=img.decode_workers),
        )
        self.budget = self._budget(registry, redis_prefix)
        self.affinity = ImageAffinity(ttl_s=img.affinity_ttl_s)
        self._database = self.resources.databases.get(settings.database_url, settings.data_dir)
        self.index = DocumentIndex(
            MiniLMEmbedder(self.resources.minilm),
            max_team_bytes=config.inputs.team_document_bytes,
            max_team_documents=config.inputs.team_documents,
            store=DocumentStore(self._database),
        )
        self._transcriber: Transcriber | None = None
        self._synthesizer: SpeechSynthesizer | None = None
        tts = config.tts
        # Speech workers (or upstream requests) handed out round-robin between keys.
        self.speech_share = FairShare(
            "speech", capacity=tts.workers if tts.backend == "espeak" else tts.concurrency
        )
        self.conversations: SqlConversationStore | None = None
        self._assemblers: dict[str, PromptAssembler] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Prewarm and hit rates of document sets (set by the feature).
        self.document_kv: DocumentKv | None = None

    def _budget(self, registry: Registry, redis_prefix: str) -> ImageBudget:
        """The image compute budget: shared through Redis when the gateway has Redis."""
        cfg = self.config.images.budget
        if not self.settings.redis_url:
            return ImageComputeBudget(
                default_tokens_in_flight=cfg.tokens_in_flight,
                max_images_per_request=cfg.max_images_per_request,
                per_deployment=cfg.per_deployment,
            )
        fallbacks = registry.counter(
            "fleetgate_image_budget_fallbacks_total",
            "Image requests admitted by the per-process budget because Redis was unavailable.",
        )
        return SharedImageBudget(
            self.resources.redis.client(self.settings.redis_url),
            default_tokens_in_flight=cfg.tokens_in_flight,
            max_images_per_request=cfg.max_images_per_request,
            per_deployment=cfg.per_deployment,
            prefix=redis_prefix,
            on_unavailable=fallbacks.inc,
        )

    async def start(self) -> None:
        """Follow the stored team documents; open the conversation store (migrating the
        database) when conversations are on."""
        shared = self.resources.shared
        await shared.follow(shared.state(self._database, DOCUMENTS_KIND), self.index.follow)
        if self.config.conversations.enabled:
            await self.resources.databases.migrate(self._database)
            conv = self.config.conversations
            self.conversations = SqlConversationStore(
                self._database.engine,
                max_turns=conv.max_history_turns,
                max_conversations=conv.max_per_owner,
            )

    async def aclose(self) -> None:
        """Finish queued writes, then close sessions and workers (shared ones: their owner)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.budget.aclose()
        await self.fetcher.aclose()
        await self.processor.aclose()
        if self._transcriber is not None:
            await self._transcriber.aclose()
        if self._synthesizer is not None:
            await self._synthesizer.aclose()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background (off the request path); awaited by `aclose`."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def transcriber(self) -> Transcriber:
        """The speech-in pipeline over the configured backend (created on first use)."""
        if self._transcriber is None:
            asr = self.config.asr
            backend: SegmentTranscriber
            if asr.backend == "openai":
                backend = _upstream(OpenAITranscriber, asr, self.resources.http)
                preparer: AudioPreparer = IsolatedAudioDecoder(
                    timeout_s=asr.timeout_s, on_failure=self._worker_failed
                )
            else:
                backend = preparer = PocketsphinxTranscriber(
                    workers=asr.workers, timeout_s=asr.timeout_s, on_failure=self._worker_failed
                )
            limits = self.inputs.audio_limits()
            # One key's backlog never stands between another key and the workers.
            share = FairShare(
                "transcription", capacity=asr.workers, max_waiting=asr.max_waiting_per_key
            )
            self._transcriber = Transcriber(backend, limits=limits, preparer=preparer, share=share)
        return self._transcriber

    @property
    def synthesizer(self) -> SpeechSynthesizer:
        """The configured text-to-speech backend (created on first use)."""
        if self._synthesizer is None:
            tts = self.config.tts
            if tts.backend == "openai":
                self._synthesizer = _upstream(OpenAISynthesizer, tts, self.resources.http)
            else:
                self._synthesizer = EspeakSynthesizer(
                    workers=tts.workers, timeout_s=tts.timeout_s, on_failure=self._worker_failed
                )
        return self._synthesizer

    def speaker(self, owner: str) -> SpeechSynthesizer:
        """The synthesizer for one request of ``owner`` (an API key): its phrases wait for
        ``owner``'s turns, so no key's backlog holds up another's speech."""
        return FairSynthesizer(self.synthesizer, self.speech_share, owner)

    def _worker_failed(self, pool: str, reason: str) -> None:
        # Called from a worker pool's thread; a counter increment is a single float add.
        self._worker_failures.labels(pool, reason).inc()

    def assembler(self, alias: str) -> PromptAssembler | None:
        """The prompt assembler of ``alias`` when it has a ``prompts`` entry."""
        config = self.config.prompts.get(alias)
        if config is None:
            return None
        return self._assembler(alias, config)

    def history_assembler(self, alias: str) -> PromptAssembler:
        """The alias's assembler, or a history-only one for aliases without prompt config."""
        found = self.assembler(alias)
        if found is not None:
            return found
        config = PromptConfig(max_history_turns=self.config.conversations.max_history_turns)
        return self._assembler(alias, config)

    def _assembler(self, alias: str, config: PromptConfig) -> PromptAssembler:
        assembler = self._assemblers.get(alias)
        if assembler is None or assembler.config is not config:
            assembler = PromptAssembler(config, index=self.index)
            self._assemblers[alias] = assembler
        return assembler
