"""`MultimodalStage`: images, speech in, conversations and speech out on the chat path.

``before`` (chat completions only; a text-only request without conversation id, prompt
config or audio output costs one scan of its messages):

1. ``image_url`` parts: per-request cap, fetched (SSRF-safe), decoded once (cache), replaced by
   the processed image; their tokens are estimated per model family and added to
   ``req.prompt_tokens`` so limits, context-window checks and cost see them. A `DispatchHook`
   prefers the replica that encoded the same images and waits for the deployment's image
   compute budget.
2. ``input_audio`` parts: transcribed (VAD + batch ASR) into text parts.
3. ``x-conversation-id`` (conversations on) or a ``prompts`` entry for the alias: the prompt is
   assembled (system prompt, profile, retrieved context, history cut to the window, image
   placeholders, question); ``after`` stores the question and the reply. The request field
   ``user_profile`` (a string, removed before the upstream) is the user's profile.
4. ``modalities: ["text", "audio"]``: for an upstream that is text-only the fields are removed
   and the reply is spoken by the gateway (streamed phrase by phrase beside the text).
5. ``x-fleetgate-debug: prompt``: the messages sent upstream (and the assembly's accounting) come
   back in the ``x-fleetgate-prompt`` header (base64 JSON, when it fits in 6 KiB) and as a
   ``fleetgate_debug`` field of the response (the first chunk of a stream).

It runs after the tenancy stage (a caller over its limits costs no image fetch) and before the
guardrails (they see transcripts); see the feature tuple in ``fleetgate.app.build_features``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import orjson

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, FilterResult, GatewayRequest, Outcome
from fleetgate.errors import InvalidRequest
from fleetgate.messages_text import content_text
from fleetgate.multimodal.audio.transcribe import Transcript
from fleetgate.multimodal.audio_stream import SpokenResponseFilter, SpokenStreamFilter, audio_format
from fleetgate.multimodal.conversation import (
    ConversationTurn,
    ReplyCapture,
    assemble_request,
    conversation_key,
    conversation_owner,
    load_history,
)
from fleetgate.multimodal.conversations.store import StoredTurn
from fleetgate.multimodal.image_dispatch import ImageDispatchHook
from fleetgate.multimodal.images.pipeline import LoadedImage
from fleetgate.multimodal.parts import (
    AudioPart,
    PartKey,
    audio_parts,
    image_parts,
    replace_parts,
)
from fleetgate.multimodal.prompt.retrieval import DocumentSet
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.speech.streamer import SpeechStreamer
from fleetgate.routing.table import RouteTable
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["MultimodalStage"]

_TURN = "multimodal.turn"
_SPOKEN = "multimodal.spoken"
_DOCUMENT_SET = "multimodal.document_set"
_HEADER_LIMIT = 6 * 1024


# Request fields that make the stage do work even for plain-text messages.
_EXTRA_FIELDS = frozenset({"user_profile", "modalities", "audio"})


def _retrieval_wanted(req: GatewayRequest) -> bool | None:
    """The semantic router's retrieval decision for ``model: auto`` (None: not routed)."""
    decision = req.state.get("semantic")
    retrieval = getattr(decision, "retrieval", None)
    return retrieval if isinstance(retrieval, bool) else None


def _may_debug(rule: str, principal: Principal) -> bool:
    """Prompt debug output shows the operator's system prompt and retrieved documents."""
    if rule == "off":
        return False
    return principal.is_master or (rule == "admins" and principal.role == "team_admin")


def _plain_text(messages: list[Any]) -> bool:
    """Every message's content is text or none (a loop: no generator per request)."""
    for m in messages:
        if not isinstance(m.get("content"), str | None):
            return False
    return True


class MultimodalStage:
    """The `fleetgate.contract.stages.Stage` of the multimodal pipeline.

    Example::

        stage = MultimodalStage(runtime, lambda: tables.table)  # the `multimodal` feature's
    """

    name = "multimodal"

    def __init__(self, runtime: MultimodalRuntime, table: Callable[[], RouteTable]) -> None:
        self.runtime = runtime
        self._table = table

    async def before(self, req: GatewayRequest) -> None:
        if req.endpoint is not Endpoint.CHAT or not isinstance(req.body.get("messages"), list):
            return
        rt = self.runtime
        conv_id = req.headers.get("x-conversation-id") if rt.config.conversations.enabled else None
        debug = req.headers.get("x-fleetgate-debug", "").lower() == "prompt" and _may_debug(
            rt.config.prompt_debug, req.principal
        )
        if (
            conv_id is None
            and not debug
            and not _EXTRA_FIELDS & req.body.keys()
            and req.alias not in rt.config.prompts
            and _plain_text(req.body["messages"])
        ):
            return  # plain text chat: nothing to fetch, transcribe, assemble or speak
        profile = req.body.get("user_profile")
        if profile is not None and not isinstance(profile, str):
            raise InvalidRequest("user_profile must be a string", param="user_profile")
        body = dict(req.body)
        body.pop("user_profile", None)
        image_tokens = await self._media(req, body)
        assembler = (
            rt.history_assembler(req.alias) if conv_id is not None else rt.assembler(req.alias)
        )
        prompt_debug: dict[str, Any] | None = None
        if assembler is not None:
            owner = conversation_owner(req.principal, rt.config.conversations.scope)
            turn_key = conversation_key(req.principal.tenant, conv_id, owner) if conv_id else None
            stored: list[StoredTurn] = []
            if turn_key is not None:
                assert rt.conversations is not None
                stored = await load_history(
                    rt.conversations,
                    turn_key,
                    tenant=req.principal.tenant,
                    user=owner,
                    limit=rt.config.conversations.max_history_turns,
                )
            question = StoredTurn("user", _question_text(body["messages"][-1]))
            prompt = await assemble_request(
                assembler,
                body["messages"],
                stored=stored,
                image_tokens=image_tokens,
                profile=profile,
                team=req.principal.team_id,
                context_window=self._window(req, assembler.config.reserve_output_tokens),
                retrieve=_retrieval_wanted(req),
            )
            body["messages"] = prompt.messages
            req.prompt_tokens = prompt.prompt_tokens
            prompt_debug = prompt.debug()
            if prompt.document_set is not None:
                req.state[_DOCUMENT_SET] = prompt.document_set
            if turn_key is not None:
                turn = ConversationTurn(turn_key, req.principal.tenant, question, owner=owner)
                self._capture(req, turn)
        self._speech_out(req, body)
        req.body = body
        if debug:
            self._debug(req, prompt_debug or {"messages": body["messages"]})

    async def _media(self, req: GatewayRequest, body: dict[str, Any]) -> list[int]:
        """Process image and audio parts in place; returns the current question's image tokens."""
        messages = body["messages"]
        images = image_parts(messages)
        audio = audio_parts(messages)
        if not images and not audio:
            return []
        rt = self.runtime
        rt.budget.check_request(len(images))
        tenant = req.principal.tenant
        loaded_list, transcripts = await asyncio.gather(
            asyncio.gather(*(rt.images.load(p.url, tenant=tenant, param=p.param) for p in images)),
            asyncio.gather(*(self._transcribe(req, p) for p in audio)),
        )
        loaded: dict[PartKey, LoadedImage] = {
            p.key: img for p, img in zip(images, loaded_list, strict=True)
        }
        texts = {p.key: t.text for p, t in zip(audio, transcripts, strict=True)}
        body["messages"] = replace_parts(messages, images=loaded, transcripts=texts)
        family = rt.config.images.token_family_per_alias.get(
            req.alias, rt.config.images.token_family
        )
        per_image = [loaded[p.key].tokens(family, detail=_detail(p.detail)) for p in images]
        if images:
            without = [_text_only(m) for m in body["messages"]]
            req.prompt_tokens = estimate_prompt_tokens({**body, "messages": without}) + sum(
                per_image
            )
            budget = rt.budget if rt.config.images.budget.enabled else None
            req.dispatch_hooks.append(
                ImageDispatchHook(
                    [img.cache_key for img in loaded_list],
                    sum(per_image),
                    affinity=rt.affinity if rt.config.images.affinity else None,
                    budget=budget,
                    queue_timeout_s=rt.config.images.budget.queue_timeout_s,
                    owner=req.principal.key_id,
                )
            )
        else:
            req.prompt_tokens = estimate_prompt_tokens(body)
        last = len(messages) - 1
        return [n for p, n in zip(images, per_image, strict=True) if p.key[0] == last]

    def _window(self, req: GatewayRequest, reserve: int) -> int | None:
        """The smallest context window of the alias's deployments, less what ``max_tokens``
        needs beyond the assembler's own reserve."""
        try:
            route = self._table().route(req.alias)
        except Exception:  # noqa: BLE001 - an unknown alias is reported by routing later
            return None
        windows = [d.config.context_window for d in route.deployments if d.config.context_window]
        if not windows:
            return None
        return max(1, min(windows) - max(0, req.max_tokens - reserve))

    def _capture(self, req: GatewayRequest, turn: ConversationTurn) -> None:
        req.state[_TURN] = turn
        capture = ReplyCapture(turn)
        if req.stream:
            req.stream_filters.append(capture)
        else:
            req.response_filters.append(capture)

    def _speech_out(self, req: GatewayRequest, body: dict[str, Any]) -> None:
        modalities = body.get("modalities")
        if not isinstance(modalities, list) or "audio" not in modalities:
            return
        rt = self.runtime
        if req.alias in rt.config.tts.native_audio_aliases:
            return
        raw = body.get("audio")
        spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
        voice = spec.get("voice", "alloy")
        fmt_name = spec.get("format", "pcm16" if req.stream else "wav")
        if not isinstance(voice, str) or not voice:
            raise InvalidRequest("audio.voice must be a string", param="audio.voice")
        try:
            fmt = audio_format(str(fmt_name))
        except KeyError:
            raise InvalidRequest(
                "audio.format must be one of wav, mp3, flac, opus, pcm16", param="audio.format"
            ) from None
        if req.stream and fmt != "pcm":
            raise InvalidRequest("streamed audio must use format pcm16", param="audio.format")
        body.pop("audio", None)
        text_only = [m for m in modalities if m != "audio"]
        if text_only:
            body["modalities"] = text_only
        else:
            body.pop("modalities", None)
        if req.stream:
            streamer = SpeechStreamer(
                rt.speaker(req.principal.key_id),
                voice=voice,
                max_concurrency=rt.config.tts.max_concurrency,
            )
            spoken = SpokenStreamFilter(streamer)
            req.state[_SPOKEN] = spoken
            req.stream_filters.append(spoken)
        else:
            speaker = rt.speaker(req.principal.key_id)
            req.response_filters.append(SpokenResponseFilter(speaker, voice=voice, fmt=fmt))

    async def _transcribe(self, req: GatewayRequest, part: AudioPart) -> Transcript:
        """An ``input_audio`` part's transcript, in the key's turn at the speech workers."""
        transcriber = self.runtime.transcriber
        return await transcriber.transcribe(part.data, param=part.param, owner=req.principal.key_id)

    def _debug(self, req: GatewayRequest, info: dict[str, Any]) -> None:
        encoded = base64.b64encode(orjson.dumps(info)).decode()
        if len(encoded) <= _HEADER_LIMIT:
            req.response_headers["x-fleetgate-prompt"] = encoded
        debug = _DebugField(info)
        if req.stream:
            req.stream_filters.insert(0, debug)
        else:
            req.response_filters.append(debug)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        if not req.state:  # `before` kept nothing for later (a plain text chat)
            return
        spoken = req.state.get(_SPOKEN)
        if isinstance(spoken, SpokenStreamFilter):
            self.runtime.spawn(spoken.aclose())
        doc_set = req.state.get(_DOCUMENT_SET)
        kv = self.runtime.document_kv
        if isinstance(doc_set, DocumentSet) and kv is not None and outcome.status == 200:
            kv.observe(
                req.principal.tenant,
                doc_set,
                prompt_tokens=outcome.prompt_tokens,
                cached_tokens=outcome.cached_tokens,
            )
        turn = req.state.get(_TURN)
        store = self.runtime.conversations
        if isinstance(turn, ConversationTurn) and store is not None and outcome.status == 200:
            reply = StoredTurn("assistant", "".join(turn.reply))
            self.runtime.spawn(
                store.append(
                    turn.key,
                    [turn.question, reply],
                    tenant=turn.tenant,
                    user=turn.owner,
                    request_id=req.request_id,
                )
            )


class _DebugField:
    """Adds ``fleetgate_debug`` to the response (or the first chunk of a stream)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info: dict[str, Any] | None = info

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        if self.info is not None:
            chunk = {**chunk, "fleetgate_debug": self.info}
            self.info = None
        return FilterResult([chunk])

    async def finish(self) -> FilterResult:
        return FilterResult([])

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "fleetgate_debug": self.info}


def _detail(value: str) -> Any:
    return value if value in ("auto", "low", "high") else "auto"


def _text_only(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    kept = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image_url")]
    return {**message, "content": kept}


def _question_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return content_text(content, coerce=True)
    return str(content or "")
