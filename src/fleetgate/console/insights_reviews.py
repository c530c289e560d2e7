"""The human review queue in the console (``/ui/insights/reviews``): a reviewer reads requests
sampled from production (``insights.review_share``) and scores each against the rubric.

The payload policy holds on the page too: an item's prompt and answer are shown only while its
team logs payloads (a team that stopped since the sample was taken shows neither). A score is
a form per item (POST-redirect-GET, CSRF-checked, audited as ``insights.review`` like the
admin API's ``POST /admin/insights/reviews/{request_id}``); a refused form comes back with the
values kept and the criterion named. The scores feed the quality report by alias and version.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import page_number
from fleetgate.console.insights import insights_team
from fleetgate.console.sessions import Session
from fleetgate.errors import InvalidRequest
from fleetgate.insights.reports import InsightsReports, ReviewFilter
from fleetgate.messages_text import content_text

__all__ = ["ReviewPages"]

SHOW = {"unscored": False, "scored": True, "all": None}
_TEXT_LIMIT = 20_000  # characters of a prompt or answer shown


def _turns(prompt: Any) -> list[tuple[str, str]]:
    """A stored prompt (chat messages or a completion prompt) as (role, text) turns."""
    if isinstance(prompt, str):
        return [("user", prompt[:_TEXT_LIMIT])]
    if not isinstance(prompt, list):
        return []
    return [
        (str(m.get("role", "?")), (content_text(m.get("content")) or "")[:_TEXT_LIMIT])
        for m in prompt
        if isinstance(m, dict)
    ]


class ReviewPages:
    def __init__(self, console: Console, reports: InsightsReports | None) -> None:
        self.console = console
        self.reports = reports

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/insights/reviews", self.page),
            web.post("/ui/insights/reviews/{request_id}", self.score),
        ]

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        return await self._page(request, session)

    async def _page(
        self,
        request: web.Request,
        session: Session,
        *,
        error: tuple[str, str] | None = None,  # (request id, message)
        values: dict[str, str] | None = None,
        status: int = 200,
    ) -> web.Response:
        if self.reports is None:
            return self.console.page(request, session, "insights_off.html", status, tab="reviews")
        q = request.query
        show = q.get("show", "unscored")
        if show not in SHOW:
            raise InvalidRequest("'show' must be unscored, scored or all", param="show")
        alias = q.get("alias", "").strip()
        ref = q.get("team", "").strip()
        team_id = await insights_team(self.console, session, ref)
        page = page_number(q.get("page"))
        size = self.console.config.page_size
        which = ReviewFilter(team_id, alias or None, SHOW[show], size + 1, (page - 1) * size)
        rows = await self.reports.reviews(which)
        cache = self.console.tenancy.cache
        items = []
        for r in rows[:size]:
            team = cache.team(r["team_id"]) if r["team_id"] else None
            shown = team is not None and bool(team.log_payloads) and not r["payload_withheld"]
            items.append({
                **r, "payload_shown": shown, "turns": _turns(r["prompt"]) if shown else [],
                "answer": (r["response"] or "")[:_TEXT_LIMIT] if shown else "",
            })  # fmt: skip
        view = {"show": show, "alias": alias, "team": ref}
        return self.console.page(
            request, session, "insights_reviews.html", status, tab="reviews", items=items,
            rubric=self.reports.config.review_rubric, view=view, page=page,
            more=len(rows) > size, query=urlencode({k: v for k, v in view.items() if v}),
            error=error, values=values or {},
        )  # fmt: skip

    async def score(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        if self.reports is None:
            raise web.HTTPFound("/ui/insights/reviews")
        request_id = request.match_info["request_id"]
        form = await self.console.form(request)
        rubric = self.reports.config.review_rubric
        missing = [c for c in rubric if form.get(c, "") not in ("1", "2", "3", "4", "5")]
        if missing:
            message = f"Give {', '.join(missing)} a score from 1 to 5."
            return await self._page(
                request, session, error=(request_id, message), values=form, status=400
            )
        scores = self.reports.check_scores({c: int(form[c]) for c in rubric})
        actor = session.principal
        team = None if actor.is_master else (actor.team_id or "")
        await self.reports.score(request_id, scores, actor.key_id, team)  # 404: not yours
        await self.console.record(actor, "insights.review", request_id, scores)
        await self.console.flash(session, f"Scores saved for {request_id}.")
        back = {k: v for k, v in request.query.items() if k in ("show", "alias", "team", "page")}
        raise web.HTTPFound("/ui/insights/reviews" + (f"?{urlencode(back)}" if back else ""))
