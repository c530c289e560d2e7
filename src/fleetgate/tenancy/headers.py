"""OpenAI-style ``x-ratelimit-*`` response headers from a reservation or a denial."""

from __future__ import annotations

from fleetgate.limits.base import Scope, ScopeUsage

__all__ = ["duration", "ratelimit_headers"]


def duration(ms: int) -> str:
    """``1m0s``, ``6.5s``, ``20ms``: the format OpenAI uses in ``x-ratelimit-reset-*``."""
    ms = max(int(ms), 0)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    seconds = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


def ratelimit_headers(scopes: tuple[Scope, ...], usage: list[ScopeUsage]) -> dict[str, str]:
    """Headers for the tightest scope by requests and the tightest by tokens."""
    headers: dict[str, str] = {}
    best_rq: tuple[int, int, int] | None = None
    best_tk: tuple[int, int, int] | None = None
    for s, u in zip(scopes, usage, strict=False):
        if s.rpm is not None and u.remaining_requests is not None:
            if best_rq is None or u.remaining_requests < best_rq[1]:
                best_rq = (s.rpm, u.remaining_requests, u.reset_requests_ms)
        if s.tpm is not None and u.remaining_tokens is not None:
            if best_tk is None or u.remaining_tokens < best_tk[1]:
                best_tk = (s.tpm, u.remaining_tokens, u.reset_tokens_ms)
    if best_rq is not None:
        headers["x-ratelimit-limit-requests"] = str(best_rq[0])
        headers["x-ratelimit-remaining-requests"] = str(max(best_rq[1], 0))
        headers["x-ratelimit-reset-requests"] = duration(best_rq[2])
    if best_tk is not None:
        headers["x-ratelimit-limit-tokens"] = str(best_tk[0])
        headers["x-ratelimit-remaining-tokens"] = str(max(best_tk[1], 0))
        headers["x-ratelimit-reset-tokens"] = duration(best_tk[2])
    return headers
