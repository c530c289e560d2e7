"""The admin and request audit logs (`fleetgate.tenancy.reports.audit_log`) and the guardrail
events (the safety feature's `AuditLog`): search, filter, pages of ``page_size`` rows."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlencode

from aiohttp import web

from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import page_number, page_of
from fleetgate.errors import InvalidRequest
from fleetgate.tenancy.reports import audit_log

__all__ = ["AuditPages", "GuardrailEvents"]

# Guardrail events are read newest first from the start of the log: a page deeper than this
# asks for a narrower filter instead of reading ever more rows.
MAX_GUARDRAIL_ROWS = 5000


class GuardrailEvents(Protocol):
    async def recent(
        self, *, limit: int = 100, key_id: str | None = None, flagged: bool | None = None
    ) -> list[dict[str, Any]]: ...


class AuditPages:
    def __init__(self, console: Console, guardrails: GuardrailEvents | None) -> None:
        self.console = console
        self.guardrails = guardrails

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/ui/audit", self.audit), web.get("/ui/guardrails", self.events)]

    async def audit(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        q = request.query
        kind = q.get("kind", "admin")
        search = q.get("q", "").strip() or None
        page = page_number(q.get("page"))
        size = self.console.config.page_size
        rows = await audit_log(
            self.console.tenancy.db, session.principal, kind, size + 1,
            offset=(page - 1) * size, search=search,
        )  # fmt: skip
        query = urlencode({k: v for k, v in {"kind": kind, "q": search or ""}.items() if v})
        return self.console.page(
            request, session, "audit.html", rows=rows[:size], more=len(rows) > size, page=page,
            kind=kind, search=search or "", query=query,
        )  # fmt: skip

    async def events(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        q = request.query
        if self.guardrails is None:
            return self.console.page(
                request, session, "guardrails.html", rows=[], more=False, page=1, flagged="",
                key_id="", query="", off=True,
            )  # fmt: skip
        flagged = {"true": True, "false": False, "": None}.get(q.get("flagged", ""), None)
        key_id = q.get("key_id", "").strip() or None
        if key_id is not None and ("\x00" in key_id or len(key_id) > 40):
            raise InvalidRequest("'key_id' is not a key id", param="key_id")
        page = page_number(q.get("page"))
        size = self.console.config.page_size
        if page * size > MAX_GUARDRAIL_ROWS:
            raise InvalidRequest(
                f"Only the newest {MAX_GUARDRAIL_ROWS} events are paged; filter by key.",
                param="page",
            )
        rows = await self.guardrails.recent(limit=page * size + 1, key_id=key_id, flagged=flagged)
        query = urlencode({k: v for k, v in {"flagged": q.get("flagged", ""),
                                            "key_id": key_id or ""}.items() if v})  # fmt: skip
        shown, more = page_of(rows, page, size)
        return self.console.page(
            request, session, "guardrails.html", rows=shown, more=more, page=page,
            flagged=q.get("flagged", ""), key_id=key_id or "", query=query, off=False,
        )  # fmt: skip
