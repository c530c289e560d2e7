"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/speech`` (OpenAI wire format).

Transcriptions take a multipart upload (``file``, ``model``, optional ``language``,
``prompt``, ``response_format`` of json / text / verbose_json / srt / vtt) and run the
speech-in pipeline (decode, 16 kHz, VAD, batch ASR); the upload is read within
``multimodal.inputs`` (`fleetgate.multimodal.budgets.InputBudget`). Speech takes JSON
(``model``, ``input``, ``voice``, ``response_format`` of wav / pcm / mp3 / flac / opus,
``speed``) and streams the audio phrase by phrase as it is synthesised. Both authenticate
like the chat route and pass the same stages (`fleetgate.contract.stages.StageRun`): the
key's allowed models, RPM/TPM/parallel limits and budget apply, and each request is audited
and counted in spend (tokens estimated from the text spoken or transcribed; cost from
``tts.price_per_mchars_usd`` per million characters and ``asr.price_per_minute_usd`` per
minute of audio, zero when unset).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from aiohttp import web

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.api.uploads import UploadForm
from fleetgate.contract.flow import end_reply
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.contract.stages import StageRun
from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.http.body import read_json
from fleetgate.multimodal.audio.formats import FORMATS as TRANSCRIPT_FORMATS
from fleetgate.multimodal.audio.formats import render_transcript
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.speech.encode import AudioStreamEncoder
from fleetgate.multimodal.speech.espeak import OPENAI_VOICES
from fleetgate.multimodal.speech.streamer import SpeechStreamer
from fleetgate.store.fields import require_fits
from fleetgate.tenancy.money import unit_cost_nusd
from fleetgate.tenancy.tables import spend
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["audio_routes", "speech", "transcriptions"]

_SPEECH_FORMATS = ("wav", "pcm", "mp3", "flac", "opus")


def audio_routes(runtime: MultimodalRuntime) -> list[web.RouteDef]:
    """The audio endpoints over ``runtime`` (served when the multimodal pipeline is on)."""
    return [
        web.post("/v1/audio/transcriptions", partial(transcriptions, runtime)),
        web.post("/v1/audio/speech", partial(speech, runtime)),
    ]


def _principal(request: web.Request) -> Principal:
    gw = request.app[GATEWAY]
    return gw.core.auth.authenticate_request(request.headers)


def _gateway_request(
    gw: GatewayState, endpoint: Endpoint, principal: Principal, body: dict[str, Any], tokens: int
) -> GatewayRequest:
    model: str = body["model"]
    require_fits(model, spend.c.alias, "model")  # stored with the spend of the request
    gw.check_model(principal, model, routed=False)  # audio engines are not route aliases
    req = GatewayRequest(
        request_id=gw.core.request_ids.next(),
        endpoint=endpoint,
        principal=principal,
        body=body,
        alias=model,
        stream=False,
        want_usage=False,
        prompt_tokens=tokens,
        max_tokens=0,
        received_at=time.time(),
        started=time.perf_counter(),
    )
    req.outcome.prompt_tokens = tokens  # the estimate is the count: no upstream usage
    return req


def _headers(req: GatewayRequest, content_type: str) -> dict[str, str]:
    return {"Content-Type": content_type, "x-request-id": req.request_id, **req.response_headers}


def _check_fields(fields: dict[str, str]) -> None:
    """Refuse bad fields seen so far (called before the limits, and again after the file)."""
    fmt = fields.get("response_format", "json")
    if fmt not in TRANSCRIPT_FORMATS:
        raise InvalidRequest(
            f"response_format must be one of {', '.join(TRANSCRIPT_FORMATS)}",
            param="response_format",
        )


async def _read_upload(
    request: web.Request, gw: GatewayState, runtime: MultimodalRuntime
) -> tuple[UploadForm, dict[str, str]]:
    """The upload's fields up to the file; the whole form when ``model`` comes after the file
    (read within the input budget either way, before the limits apply only in that case)."""
    inputs = runtime.inputs
    form = UploadForm(request, inputs, file_bytes=inputs.audio_bytes, timeout_s=gw.body_timeout_s)
    fields = await form.read_fields()
    if not fields.get("model"):
        fields = await form.read_rest()
    if not form.has_file:
        raise InvalidRequest("'file' is required and must not be empty", param="file")
    if not fields.get("model"):
        raise InvalidRequest("'model' is required", param="model")
    _check_fields(fields)
    return form, fields


async def transcriptions(runtime: MultimodalRuntime, request: web.Request) -> web.Response:
    # Authenticated from the headers, and limited as soon as the model is known: the file is
    # read only after the stages have admitted the request (when, as the OpenAI SDKs do, the
    # client sends ``model`` before ``file``).
    principal = _principal(request)
    gw = request.app[GATEWAY]
    form, fields = await _read_upload(request, gw, runtime)
    req = _gateway_request(gw, Endpoint.AUDIO_TRANSCRIPTIONS, principal, dict(fields), 0)
    async with StageRun(gw.stages, req) as outcome:
        outcome.deployment = f"asr:{runtime.config.asr.backend}"
        fields = await form.read_rest()
        _check_fields(fields)
        if not form.file:
            raise InvalidRequest("'file' is required and must not be empty", param="file")
        transcript = await runtime.transcriber.transcribe(
            form.file,
            language=fields.get("language") or None,
            prompt=fields.get("prompt") or None,
            owner=principal.key_id,
        )
        outcome.completion_tokens = estimate_prompt_tokens({"input": transcript.text})
        asr = runtime.config.asr
        outcome.cost_nusd = unit_cost_nusd(asr.price_per_minute_usd, transcript.duration, 60)
        body, content_type = render_transcript(transcript, fields.get("response_format", "json"))
        return web.Response(body=body, headers=_headers(req, content_type))


def _speech_request(
    body: dict[str, Any], runtime: MultimodalRuntime
) -> tuple[str, str, str, float]:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("'model' is required", param="model")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("'input' is required and must be a non-empty string", param="input")
    limit = runtime.config.tts.max_input_chars
    if len(text) > limit:
        raise InvalidRequest(f"'input' is longer than {limit} characters", param="input")
    voice = body.get("voice")
    if not isinstance(voice, str) or not voice:
        raise InvalidRequest("'voice' is required", param="voice")
    if runtime.config.tts.backend == "espeak" and voice not in OPENAI_VOICES:
        raise InvalidRequest(
            f"voice must be one of {', '.join(sorted(OPENAI_VOICES))}", param="voice"
        )
    fmt = body.get("response_format", "mp3")
    if fmt not in _SPEECH_FORMATS:
        raise InvalidRequest(
            f"response_format must be one of {', '.join(_SPEECH_FORMATS)}",
            param="response_format",
        )
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0:
        raise InvalidRequest("speed must be a number from 0.25 to 4.0", param="speed")
    return text, voice, str(fmt), float(speed)


async def speech(runtime: MultimodalRuntime, request: web.Request) -> web.StreamResponse:
    principal = _principal(request)
    gw = request.app[GATEWAY]
    body = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
    text, voice, fmt, speed = _speech_request(body, runtime)
    tokens = estimate_prompt_tokens(body)
    req = _gateway_request(gw, Endpoint.AUDIO_SPEECH, principal, body, tokens)
    tts = runtime.config.tts
    async with StageRun(gw.stages, req) as outcome:
        outcome.deployment = f"tts:{tts.backend}"
        resp = await _speak(request, req, runtime, text, voice, fmt, speed)
        outcome.cost_nusd = unit_cost_nusd(tts.price_per_mchars_usd, len(text), 1_000_000)
        return resp


async def _speak(
    request: web.Request,
    req: GatewayRequest,
    runtime: MultimodalRuntime,
    text: str,
    voice: str,
    fmt: str,
    speed: float,
) -> web.StreamResponse:
    encoder = AudioStreamEncoder(fmt)
    streamer = SpeechStreamer(
        runtime.speaker(req.principal.key_id),
        voice=voice,
        speed=speed,
        max_concurrency=runtime.config.tts.max_concurrency,
    )
    streamer.feed(text)
    streamer.finish()
    resp = web.StreamResponse(headers=_headers(req, encoder.content_type))
    try:
        async for piece in streamer:
            data = encoder.encode(piece.audio)
            if not resp.prepared:
                await resp.prepare(request)
            if data:
                await resp.write(data)
        if not resp.prepared:
            await resp.prepare(request)
        tail = encoder.finish()
        if req.at_end is not None:  # a full slot's settle, before the end of the audio leaves
            await end_reply(req)
        if tail:
            await resp.write(tail)
        await resp.write_eof()
    except FleetgateError:
        if resp.prepared and request.transport is not None:
            # The status line is sent and raw audio has no error frame: cut the connection so
            # the client sees an incomplete body (not a short file, not a hang).
            request.transport.close()
        raise
    finally:
        await streamer.aclose()
    return resp
