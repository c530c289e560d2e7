"""Secrets out of a config before anyone sees it (``GET /admin/config``, logs).

Redacts by field name, wherever the field sits (deployments, speech backends, safety checks'
options, future sections): every ``api_key``, ``*secret*``, ``*password*``, ``*token*`` (not
token counts), ``authorization`` value, every value of a ``*headers`` mapping; and, in every
string that is a URL, the password of its user part and the values of query parameters that
look like credentials (``key``, ``token``, ``sig``, ``api-key``, ...). Webhook URLs often carry
their secret in the path, so ``*webhook*`` URLs keep only their scheme and host.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_config"]

REDACTED = "***"

_SECRET_KEY = re.compile(r"(api_?key|secret|password|passwd|authorization|credential)", re.I)
_TOKEN_KEY = re.compile(r"(^|_)token$|^access_token|^auth_token|^bearer", re.I)
_HEADERS_KEY = re.compile(r"headers$", re.I)
_WEBHOOK_KEY = re.compile(r"webhook", re.I)
_SECRET_PARAM = re.compile(r"(key|token|sig|signature|secret|password|auth|code)", re.I)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)


def _redact_url(value: str, *, keep_path: bool) -> str:
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        user = parts.username or ""
        netloc = f"{user}:{REDACTED}@{netloc}" if parts.password is not None else f"{user}@{netloc}"
    if not keep_path:
        return urlunsplit((parts.scheme, netloc, "/" + REDACTED if parts.path else "", "", ""))
    query = urlencode(
        [(k, REDACTED if _SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key) or _TOKEN_KEY.search(key))


def _value(key: str, value: Any) -> Any:
    if value is None or value == "":
        return value
    if _is_secret_key(key):
        return REDACTED
    if _HEADERS_KEY.search(key) and isinstance(value, dict):
        return {k: REDACTED for k in value}
    if isinstance(value, str) and _URL.match(value):
        return _redact_url(value, keep_path=not _WEBHOOK_KEY.search(key))
    return redact_config(value)


def redact_config(data: Any) -> Any:
    """A copy of ``data`` (a config dumped to JSON types) with every secret replaced."""
    if isinstance(data, dict):
        return {k: _value(str(k), v) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_config(v) for v in data]
    if isinstance(data, str) and _URL.match(data):
        return _redact_url(data, keep_path=True)
    return data
