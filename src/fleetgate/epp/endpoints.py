"""A deployment's endpoint as the Endpoint Picker Protocol names it: ``ip:port``."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from fleetgate.routing.deployment import Deployment

__all__ = ["endpoint_of", "endpoint_of_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@lru_cache(maxsize=4096)
def endpoint_of_url(api_base: str) -> str:
    """``http://10.0.0.7:8000/v1`` -> ``10.0.0.7:8000`` (an IPv6 host in brackets)."""
    parts = urlsplit(api_base)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def endpoint_of(dep: Deployment) -> str:
    """The engine ``dep`` sends to, as Envoy's original-destination cluster dials it."""
    return endpoint_of_url(dep.config.api_base)
