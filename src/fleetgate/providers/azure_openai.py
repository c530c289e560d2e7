"""Azure OpenAI: the deployment URL and the authentication header.

Azure OpenAI speaks the OpenAI wire format but addresses a *deployment* rather than a model and
versions the API by query string::

    POST https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT/chat/completions
         ?api-version=2024-10-21
    api-key: KEY                         (or: Authorization: Bearer ENTRA_ID_TOKEN)

The ``model`` field of the body is ignored by Azure; the deployment decides.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote, urlencode

from fleetgate.errors import ConfigError

__all__ = ["AZURE_ENDPOINTS", "AzureEndpoint", "azure_headers", "azure_url"]

AzureEndpoint = Literal["chat/completions", "completions", "embeddings"]
AZURE_ENDPOINTS: tuple[str, ...] = ("chat/completions", "completions", "embeddings")


def azure_url(api_base: str, deployment: str, endpoint: AzureEndpoint, api_version: str) -> str:
    """The Azure OpenAI URL for one deployment and endpoint.

    ``api_base`` is the resource endpoint, with or without a trailing ``/`` or ``/openai``.

    Example::

        >>> azure_url("https://r.openai.azure.com/", "d", "embeddings", "2024-10-21")
        'https://r.openai.azure.com/openai/deployments/d/embeddings?api-version=2024-10-21'
    """
    if not api_base.startswith(("https://", "http://")):
        raise ConfigError(f"azure api_base must be an http(s) URL, got {api_base!r}")
    if not deployment:
        raise ConfigError("azure deployment name must not be empty")
    if endpoint not in AZURE_ENDPOINTS:
        raise ConfigError(f"azure endpoint must be one of {AZURE_ENDPOINTS}, got {endpoint!r}")
    if not api_version:
        raise ConfigError("azure api_version must not be empty")
    base = api_base.rstrip("/").removesuffix("/openai")
    query = urlencode({"api-version": api_version})
    return f"{base}/openai/deployments/{quote(deployment, safe='')}/{endpoint}?{query}"


def azure_headers(api_key: str | None = None, *, ad_token: str | None = None) -> dict[str, str]:
    """Azure's authentication header: ``api-key`` for a key, ``Authorization`` for an Entra token.

    Azure keys go in ``api-key``, never in ``Authorization``; exactly one of the two is needed.
    """
    if (api_key is None) == (ad_token is None):
        raise ConfigError("azure needs exactly one of api_key and ad_token")
    if api_key is not None:
        return {"api-key": api_key}
    return {"Authorization": f"Bearer {ad_token}"}
