"""HTML rendering: one Jinja2 environment over the package's templates (auto-escaped)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

__all__ = ["Renderer"]


def _when(ms: Any) -> str:
    if not isinstance(ms, int | float):
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _usd(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"${value:,.6f}" if 0 < abs(value) < 0.01 else f"${value:,.4f}"


class Renderer:
    """Renders a template with the page's context into an HTML response."""

    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("fleetgate.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["usd"] = _usd

    def html(self, template: str, status: int = 200, **context: Any) -> web.Response:
        body = self.env.get_template(template).render(**context)
        return web.Response(
            text=body,
            status=status,
            content_type="text/html",
            headers={
                "Cache-Control": "no-store",
                "X-Frame-Options": "DENY",
                "Referrer-Policy": "same-origin",
                "Content-Security-Policy": (
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                    "script-src 'self'; frame-ancestors 'none'; form-action 'self'"
                ),
            },
        )
