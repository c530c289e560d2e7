"""Where a team's time to first token went: the gateway (its queue included) or the engine.

The simulator records, per request, when it arrived, was first scheduled and produced its
first token (``GET /sim/timings``, on ``time.monotonic()``'s clock, which every process on
the host shares); the client records when it sent the request and when the first token came.
Joined on ``x-request-id``, each TTFT splits into

- ``to_engine``: sent -> arrived at the engine (the gateway's stages and admission queue);
- ``engine_wait``: arrived -> scheduled (the engine's own queue: its batch was full);
- ``engine_run``: scheduled -> first token (the step in progress, then its prefill step);
- ``back``: first token -> the client has it (the relay, and the client's own loop).

``tail`` is the mean of each part over the requests at or above the TTFT p95: what the p95
is made of.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from load import Sample, pct

PARTS = ("to_engine", "engine_wait", "engine_run", "back")


def engine_timings(sim_url: str) -> dict[str, dict[str, Any]]:
    """The simulator's per-request records, by request id."""
    with urllib.request.urlopen(f"{sim_url}/sim/timings", timeout=10) as resp:
        records = json.loads(resp.read())
    return {r["request_id"]: r for r in records if r.get("request_id")}


def breakdown(
    samples: list[Sample], timings: dict[str, dict[str, Any]], team: str, full_at: int
) -> dict[str, Any]:
    """The split of ``team``'s TTFTs (ms); ``full_at``: the engine's max_num_seqs."""
    rows: list[dict[str, float]] = []
    full = preempted = 0
    for s in samples:
        if s.team != team or s.status != 200 or s.ttft is None or s.request_id is None:
            continue
        t = timings.get(s.request_id)
        if t is None or t["scheduled"] is None or t["first_token"] is None:
            continue
        first = s.sent + s.ttft
        rows.append(
            {
                "ttft": s.ttft,
                "to_engine": t["arrival"] - s.sent,
                "engine_wait": t["scheduled"] - t["arrival"],
                "engine_run": t["first_token"] - t["scheduled"],
                "back": first - t["first_token"],
            }
        )
        full += t["running_at_arrival"] >= full_at
        preempted += t["preemptions"] > 0
    if not rows:
        return {"joined": 0}
    cut = pct([r["ttft"] for r in rows], 0.95)
    tail = [r for r in rows if r["ttft"] >= cut] or rows
    out: dict[str, Any] = {
        "joined": len(rows),
        "engine_full_at_arrival": round(full / len(rows), 3),
        "preempted": preempted,
    }
    for part in PARTS:
        values = [r[part] for r in rows]
        out[part] = {
            "p50": round(pct(values, 0.5) * 1000, 1),
            "p95": round(pct(values, 0.95) * 1000, 1),
            "tail": round(sum(r[part] for r in tail) / len(tail) * 1000, 1),
        }
    return out


def others_preempted(timings: dict[str, dict[str, Any]], ids: set[str]) -> int:
    """Preemptions the engine made of requests not in ``ids``."""
    return sum(t["preemptions"] for rid, t in timings.items() if rid not in ids)
