"""Release pipelines (master only, like ``/admin/pipelines``): every run with its status and the
step it is at (``/ui/pipelines``, ``?model=`` to narrow); one run as a timeline
(``/ui/pipelines/{model}/{version}``): each step with its start, finish and duration, who ran it,
the gateways that resumed it after a restart, engines adopted rather than started again, its
failure; the gate's verdict with the rules that decided it; the rollout's traffic steps, the
share the candidate has now and its decisions; the versions whose engines were kept. While a run
is under way the page refreshes itself through htmx (the same page, its ``#timeline`` swapped).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from fleetgate.console.core import Console
from fleetgate.console.forms import page_number, page_of
from fleetgate.console.pipeline_chart import timeline_chart
from fleetgate.console.registry import Releases
from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.releases.pipeline import STEPS
from fleetgate.releases.pipeline_store import Pipeline

__all__ = ["PipelinePages", "step_rows"]

MASTER = ("master",)
REFRESH_S = 2
DECISIONS_SHOWN = 12


def _seconds(start: Any, end: Any) -> float | None:
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    return max(0.0, (end - start) / 1000)


def _marks(step: dict[str, Any]) -> list[str]:
    """What a person should notice about a step, in words."""
    detail = step.get("detail") or {}
    marks = [f"resumed by {owner} after a restart" for owner in step.get("resumed", [])]
    if detail.get("adopted"):
        pids = ", ".join(str(p) for p in detail["adopted"])
        marks.append(f"engine already running adopted (pid {pids}), not started again")
    if step.get("status") == "failed" and detail.get("error"):
        marks.append(f"failed: {detail['error']}")
    return marks


def _summary(step: dict[str, Any]) -> str:
    """The step's outcome in one line (the sections below give the whole of it)."""
    detail = step.get("detail") or {}
    name = step["name"]
    if name in ("instance_up", "production_up") and detail.get("urls"):
        return "engines at " + ", ".join(detail["urls"])
    if name == "suites":
        runs = len(detail.get("runs", {}))
        memory = detail.get("memory") or {}
        rss = memory.get("memory_rss_bytes")
        text = f"{runs} suite run{'s' if runs != 1 else ''} stored"
        return text + (f"; peak memory {rss / 2**20:,.0f} MiB" if rss else "")
    if name == "gate" and detail.get("verdict"):
        return f"{detail['verdict']}: {detail.get('reason') or ''}".rstrip(": ")
    if name == "rollout":
        if detail.get("baseline") is None and detail.get("promoted"):
            return "promoted directly (production was empty)"
        if detail.get("baseline"):
            done = "promoted" if detail.get("promoted") else "under way"
            return f"progressive rollout from {detail['baseline']}: {done}"
    if name == "keep" and "kept" in detail:
        stopped = detail.get("stopped") or []
        return "engines kept: " + ", ".join(detail["kept"]) + (
            f"; stopped: {', '.join(stopped)}" if stopped else ""
        )  # fmt: skip
    return ""


def step_rows(run: Pipeline, now_ms: int) -> list[dict[str, Any]]:
    """The run's steps as the timeline shows them (a running step's duration runs to now)."""
    rows = []
    for step in run.steps:
        end = step.get("finished_ms") or (now_ms if step.get("status") == "running" else None)
        rows.append({
            "name": step["name"], "status": step.get("status", ""),
            "started_ms": step.get("started_ms"), "finished_ms": step.get("finished_ms"),
            "seconds": _seconds(step.get("started_ms"), end), "by": step.get("by") or "",
            "marks": _marks(step), "summary": _summary(step),
        })  # fmt: skip
    return rows


def _upcoming(run: Pipeline) -> list[str]:
    """Steps not begun yet (none once the run has ended)."""
    if run.status != "running":
        return []
    begun = {s["name"] for s in run.steps}
    return [name for name in STEPS if name not in begun]


class PipelinePages:
    def __init__(self, console: Console, releases: Releases | None) -> None:
        self.console = console
        self.releases = releases

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/pipelines", self.index),
            web.get("/ui/pipelines/{model}/{version}", self.run),
        ]

    async def _ready(self) -> Releases | None:
        releases = self.releases
        if releases is not None and releases.admin.prepare is not None:
            await releases.admin.prepare()  # the tables, before the first read
        return releases

    async def index(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, MASTER)
        page = page_number(request.query.get("page"))
        model = request.query.get("model", "").strip()
        if len(model) > 64:
            raise InvalidRequest("'model' is at most 64 characters.", param="model")
        releases = await self._ready()
        runs: list[Pipeline] = []
        if releases is not None:
            runs = await releases.pipelines.all(model or None)
        runs.sort(key=lambda r: (r.created_ms, r.version), reverse=True)  # newest first
        size = self.console.config.page_size
        listed, more = page_of(runs, page, size)
        now = int(time.time() * 1000)
        shown = [
            {**r.to_dict(), "current": r.steps[-1]["name"] if r.steps else "",
             "seconds": _seconds(r.created_ms, now if r.status == "running" else r.updated_ms),
             "verdict": (r.gate or {}).get("verdict")}
            for r in listed
        ]  # fmt: skip
        return self.console.page(
            request, session, "pipelines.html", off=releases is None, runs=shown, model=model,
            page=page, more=more, refresh_s=REFRESH_S * 2,
            query=urlencode({"model": model}) if model else "",
            running=any(r.status == "running" for r in runs),
        )  # fmt: skip

    async def run(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, MASTER)
        releases = await self._ready()
        if releases is None:
            raise NotFound("The releases feature is off in this gateway: no pipelines.")
        model, version = request.match_info["model"], request.match_info["version"]
        run = await releases.pipelines.get(model, version)  # 404 for an unknown run
        now = int(time.time() * 1000)
        rows = step_rows(run, now)
        rollout = None
        try:
            live = await releases.rollouts.get(run.alias)
        except NotFound:
            live = None
        if live is not None and live.model == model and live.candidate == version:
            rollout = live.to_dict()
            rollout["recent"] = list(reversed(live.decisions[-DECISIONS_SHOWN:]))
        keep = run.done("keep")
        return self.console.page(
            request, session, "pipeline.html", run=run.to_dict(), steps=rows,
            upcoming=_upcoming(run), chart=timeline_chart(rows, _upcoming(run)),
            gate=run.gate, rollout=rollout, kept=(keep or {}).get("detail", {}),
            refresh_s=REFRESH_S, running=run.status == "running",
            rollout_step=next((s for s in run.steps if s["name"] == "rollout"), None),
        )  # fmt: skip
