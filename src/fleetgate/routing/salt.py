"""Per-tenant prefix-cache isolation for every strategy: vLLM's ``cache_salt``.

An engine's prefix cache answers faster (and reports ``cached_tokens``) for a prompt it has
seen: without isolation one tenant can learn whether another sent a prompt. vLLM keys its
cache by ``cache_salt``, so the gateway gives each tenant its own (an HMAC of the tenant under
``routing.salt_secret``), whatever strategy picked the deployment. A caller's own
``cache_salt`` is kept apart per tenant too: it is replaced by an HMAC of tenant and salt, so
two tenants sending the same salt still never share blocks. Prompts that start with a
``routing.public_prefixes`` entry stay shared (no salt), as kv-aware routing indexes them.

Which engines take the field (``routing.cache_salt``): ``auto`` (default) sends it to
deployments known to be vLLM: ``engine: vllm`` in their config, a scrape of their metrics, or
their ``/models`` answer (``owned_by``), learned in the background; ``always`` sends it to every
OpenAI-compatible deployment; ``never`` sends none (and drops a caller's).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetgate.config.schema import RoutingConfig
from fleetgate.messages_text import content_text
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment

__all__ = ["TenantSalt", "engine_of_models", "leading_text"]

# ``owned_by`` in an engine's ``/v1/models`` answer -> the engine; fleetgate's simulator
# behaves as vLLM (it takes ``cache_salt``).
_OWNERS = {"vllm": "vllm", "fleetgate-sim": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}


def engine_of_models(answer: Any) -> str:
    """The engine behind a ``/v1/models`` answer, or ``other``."""
    data = answer.get("data") if isinstance(answer, dict) else None
    for model in data if isinstance(data, list) else ():
        if isinstance(model, dict):
            found = _OWNERS.get(str(model.get("owned_by", "")).lower())
            if found is not None:
                return found
    return "other"


class TenantSalt:
    """Adds the tenant's ``cache_salt`` to a pick (the dispatcher calls `apply` for every
    strategy's pick)."""

    def __init__(
        self,
        config: RoutingConfig,
        secret: bytes,
        scraped_engine: Callable[[Deployment], str] | None = None,
    ) -> None:
        self.config = config
        self._secret = secret
        self._scraped = scraped_engine
        self.kinds: dict[str, str] = {}  # api_base -> engine, learned from /models

    def salt(self, tenant: str, own: str | None = None) -> str:
        text = tenant if own is None else f"{tenant}\0{own}"
        digest = hmac.new(self._secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return digest.hexdigest()[:24]

    def engine(self, dep: Deployment) -> str:
        configured = dep.config.engine
        if configured != "auto":
            return configured
        known = self.kinds.get(dep.config.api_base)  # its /models answer (a dict lookup)
        if known is not None:
            return known
        return self._scraped(dep) if self._scraped is not None else ""

    def _takes_salt(self, dep: Deployment) -> bool:
        mode = self.config.cache_salt
        if mode == "never" or dep.config.provider != "openai":
            return False
        return mode == "always" or self.engine(dep) == "vllm"

    def apply(self, pick: Pick, ctx: RouteContext) -> Pick:
        """``pick`` with the salt to send (or the caller's salt replaced, or dropped)."""
        req = ctx.request
        own = req.body.get("cache_salt")
        own = own if isinstance(own, str) and own else None
        extra: Mapping[str, Any] = pick.extra_body or {}
        if not self.config.tenant_isolation and own is None:
            return pick
        if not self._takes_salt(pick.deployment) and own is None:
            return pick
        if self.config.cache_salt == "never":
            salt: str | None = None
        elif own is not None:
            salt = self.salt(req.principal.tenant, own)
        elif "cache_salt" in extra or _public(req.body, self.config.public_prefixes):
            return pick  # kv-aware already salted it, or a shared public prefix
        else:
            salt = self.salt(req.principal.tenant)
        fields = {k: v for k, v in extra.items() if k != "cache_salt"}
        if salt is not None:
            fields["cache_salt"] = salt
        return Pick(pick.deployment, fields or None, pick.uncached_tokens)

    def remember(self, kinds: Iterable[tuple[str, str]]) -> None:
        self.kinds.update(kinds)


def leading_text(body: Any) -> str:
    """The text a prompt starts with (first message, or ``prompt``): for public prefixes."""
    if not isinstance(body, Mapping):
        return ""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        return content_text(messages[0].get("content"), sep="", types=None)
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else ""


def _public(body: Mapping[str, Any], prefixes: tuple[str, ...]) -> bool:
    if not prefixes:
        return False
    lead = leading_text(body)
    return any(lead.startswith(p) for p in prefixes)
