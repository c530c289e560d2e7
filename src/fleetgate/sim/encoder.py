"""The simulator's vision encoder: encode time, an encoder cache, and vLLM's encoder
disaggregation (EPD, ``--ec-transfer-config``) in either role.

Every ``image_url`` part is an image of ``image_tokens`` tokens whose *mm hash* is a hash of its
URL (vLLM hashes the image's content; the simulator's images are their URLs). An image costs
``encode_ms_per_image_token`` per token to encode, unless it is in the engine's encoder cache
(the last ``encoder_cache_items`` images it encoded or received).

- **Aggregated** (no ``ec_role``): the engine encodes a request's new images inside its
  scheduler step, when the request is admitted, so the whole running batch waits for it (as
  vLLM runs the encoder in the model step).
- **Producer** (``ec_role: ec_producer``, an encoder instance): a request is encoded only (its
  images, one after another on the one encoder; no language-model work), answered with one
  token and ``ec_transfer_params``: per mm hash ``{"do_remote_encode": true,
  "num_encoder_tokens", "mm_base_addr", "remote_host", "remote_port"}`` (the shape of vLLM's
  network EC connectors; the shared-storage ``ECExampleConnector`` needs none, the consumer
  finds the hash in storage).
- **Consumer** (``ec_role: ec_consumer``, a language-model instance): an image whose mm hash
  has remote parameters is pulled (``ec_transfer_ms_per_token`` per encoder token, before the
  request is queued, not in a step) instead of encoded; other images are encoded locally, as
  in the aggregated case.

Example::

    plan = EncoderCache(64).plan(body, tokenizer_image_tokens=1200)
    plan.local_tokens, plan.remote_tokens, plan.hashes
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["EncodePlan", "EncoderCache", "ec_params", "image_urls", "mm_hash", "remote_params"]


def mm_hash(url: str) -> str:
    """The simulator's mm hash of an image (its URL's digest)."""
    return blake2b(url.encode(), digest_size=16).hexdigest()


def image_urls(body: Mapping[str, Any]) -> list[str]:
    """The URLs of every ``image_url`` part of the request's messages, in order."""
    urls: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        return urls
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, dict) else image
                if isinstance(url, str):
                    urls.append(url)
    return urls


@dataclass(slots=True)
class EncodePlan:
    """What one request's images cost this engine."""

    hashes: list[str] = field(default_factory=list)
    local_tokens: int = 0  # encoded here
    remote_tokens: int = 0  # pulled from an encoder instance
    cached_tokens: int = 0  # already in this engine's encoder cache


class EncoderCache:
    """The mm hashes an engine holds encoder outputs for (LRU)."""

    def __init__(self, items: int) -> None:
        self.items = max(0, items)
        self._held: OrderedDict[str, None] = OrderedDict()
        self.encoded = 0  # images encoded here
        self.received = 0  # images pulled from an encoder instance
        self.hits = 0  # images found in the cache

    def __contains__(self, key: str) -> bool:
        return key in self._held

    def _hold(self, key: str) -> None:
        if self.items == 0:
            return
        self._held[key] = None
        self._held.move_to_end(key)
        while len(self._held) > self.items:
            self._held.popitem(last=False)

    def plan(
        self, body: Mapping[str, Any], image_tokens: int, remote: Mapping[str, Any] | None = None
    ) -> EncodePlan:
        """Account the request's images: cache hits, pulls (``remote`` holds their
        ``ec_transfer_params``) and local encodes; the cache holds all of them afterwards."""
        out = EncodePlan()
        for url in image_urls(body):
            key = mm_hash(url)
            out.hashes.append(key)
            if key in self._held:
                out.cached_tokens += image_tokens
                self.hits += 1
            elif remote is not None and _pullable(remote.get(key)):
                out.remote_tokens += image_tokens
                self.received += 1
            else:
                out.local_tokens += image_tokens
                self.encoded += 1
            self._hold(key)
        return out


def _pullable(params: Any) -> bool:
    return (
        isinstance(params, dict)
        and params.get("do_remote_encode") is True
        and all(k in params for k in ("remote_host", "remote_port"))
    )


def remote_params(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's ``ec_transfer_params`` (None when absent; 400 when not an object)."""
    params = body.get("ec_transfer_params")
    if params is None:
        return None
    if not isinstance(params, dict):
        raise InvalidRequest("'ec_transfer_params' must be an object", param="ec_transfer_params")
    return params


def ec_params(hashes: list[str], image_tokens: int, host: str, port: int) -> dict[str, Any]:
    """A producer's answer: where each encoded image's output is, keyed by mm hash."""
    return {
        key: {
            "do_remote_encode": True,
            "num_encoder_tokens": image_tokens,
            "mm_base_addr": 0,
            "remote_host": host,
            "remote_port": port,
        }
        for key in hashes
    }
