"""Field types the config sections of several features share (validated, annotated strings).

``fleetgate config reference`` spells an annotated type by the type it annotates
(`fleetgate.cli.reference`), so these render as the plain type a reader writes."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

__all__ = ["HttpUrl"]


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r}: must start with http:// or https://")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""A string that must start with ``http://`` or ``https://`` (a list of them:
``tuple[HttpUrl, ...]``; an error names the URL). The reference spells it ``str``."""
