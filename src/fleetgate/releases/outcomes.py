"""What happened to each request, by version: the rollout analysis's evidence, shared by replicas.

`ReleasesStage` is the releases feature's request stage. Its ``before`` does nothing; its
``after`` (on the event loop, no I/O) hands the request's `fleetgate.contract.request.Outcome`
to the
`OutcomeBook`, which keeps, in memory:

- for an alias under a rollout (running or paused), per version and 2-second bucket: requests,
  failed requests (status >= 500, including those where **every attempt failed**, which have
  no spend record), upstream attempts and failed attempts (a request that succeeded on its
  third try counts two failed attempts: the candidate's faults show even when retries hide
  them from clients), output guardrail blocks (``finish_reason: content_filter``), and
  histograms of latency, TTFT and TPOT (bins 10% wide);
- for an alias that follows the registry, one row per request: the response id the client got,
  version, key, team, digests of the conversation and the prompt, status, blocked.

The version of a request that never reached an upstream is the one `RolloutPicker` chose for it.
Every ``flush_s`` a background task writes what changed: each replica replaces its own bucket
rows (``fg_release_outcomes``: no contention, no double counting) and appends the request rows
(``fg_release_requests``). `fleetgate.releases.windows.read_window` sums every replica's
rows for one version.

Example::

    book = OutcomeBook(db, replica="gw-a", tracked=lambda alias: alias == "chat")
    book.observe(req, outcome)          # from the stage's after
    await book.flush()
    w = await read_window(db, "chat", "v2", since_ms)   # w.error_rate, w.ttft_p95_ms, ...
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import delete
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.releases.tables import release_outcomes, release_requests
from fleetgate.releases.windows import BUCKET_MS, hist_bin
from fleetgate.routing.dispatch import FAILED_VERSIONS
from fleetgate.store.database import Database
from fleetgate.tasks import RunsInBackground, periodic

__all__ = [
    "PICKED",
    "OutcomeBook",
    "ReleasesStage",
]

log = logging.getLogger("fleetgate.releases.outcomes")

PICKED = "releases.version"  # GatewayRequest.state: the version RolloutPicker chose
_REQ = "_req"  # a pending row's request, until its digests are computed
_MAX_PENDING = 20_000  # request rows kept while the store is away; older ones are dropped


@dataclass(slots=True)
class _Bucket:
    requests: int = 0
    errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    blocked: int = 0
    latency: dict[str, int] = field(default_factory=dict)
    ttft: dict[str, int] = field(default_factory=dict)
    tpot: dict[str, int] = field(default_factory=dict)
    dirty: bool = True


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p)
        h.update(b"\x00")
    return h.hexdigest()


def prompt_digests(req: GatewayRequest) -> tuple[str, str]:
    """(conversation, prompt) digests of a request, scoped to its key.

    The conversation is the client's ``x-conversation-id`` / ``x-session-id`` header, else the
    first message; the prompt is every message sent (or the ``prompt`` of a completion). The
    same prompt from the same key again is a regeneration of the earlier answer."""
    key = (req.principal.key_id or "").encode()
    body = req.body
    messages = body.get("messages")
    raw = orjson.dumps(messages if messages is not None else body.get("prompt"))
    conv = req.headers.get("x-conversation-id") or req.headers.get("x-session-id")
    if conv is not None:
        conv_raw = b"h:" + conv.encode()
    elif isinstance(messages, list) and messages:
        conv_raw = b"m:" + orjson.dumps(messages[0])
    else:
        conv_raw = b"p:" + raw
    return _digest(key, conv_raw), _digest(key, raw)


class OutcomeBook(RunsInBackground):
    """Per-version request outcomes of this replica, written to the store in the background."""

    def __init__(
        self,
        db: Database,
        *,
        replica: str,
        tracked: Callable[[str], bool],
        recorded: Callable[[str], bool] = lambda alias: False,
        flush_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.replica = replica[:64]
        self.tracked = tracked  # alias -> is a rollout running on it
        self.recorded = recorded  # alias -> record one row per request
        self.flush_s = flush_s
        self._clock = clock
        self._buckets: dict[tuple[str, str, int], _Bucket] = {}
        self._pending: list[dict[str, Any]] = []
        self.dropped = 0
        # every flush_s; the store may be away: keep counting, retry later
        self._task = periodic(
            lambda: self.flush_s,
            self.flush,
            log,
            "outcome flush failed",
            level=logging.DEBUG,
            name="outcomes",
        )
        self._last_purge = 0.0
        self.retention_s = 30 * 86400.0  # request rows; outcome rows are kept 7 days

    # ------------------------------------------------------------------ request path
    def observe(self, req: GatewayRequest, out: Outcome) -> None:
        alias = out.alias or req.alias
        rollout = self.tracked(alias)
        record = self.recorded(alias)
        if not rollout and not record:
            return
        version = out.version or req.state.get(PICKED)
        blocked = out.finish_reason == "content_filter" or (
            out.error_type == "content_filter" and out.deployment is not None
        )
        if rollout and version is not None and out.status != 499:
            self._count(alias, version, out, blocked, req.state.get(FAILED_VERSIONS) or ())
        if record:  # the digests are computed at the flush, off the request's path
            self._pending.append({
                "request_id": req.request_id, "response_id": out.response_id,
                "created_ms": int((req.received_at or self._clock()) * 1000), "alias": alias,
                "version": version, "key_id": req.principal.key_id,
                "team_id": req.principal.team_id, "status": out.status, "blocked": blocked,
                _REQ: req,
            })  # fmt: skip
            if len(self._pending) > _MAX_PENDING:
                drop = len(self._pending) - _MAX_PENDING
                del self._pending[:drop]
                self.dropped += drop

    def _bucket(self, alias: str, version: str, now_ms: int) -> _Bucket:
        key = (alias, version, now_ms - now_ms % BUCKET_MS)
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket()
        b.dirty = True
        return b

    def _count(
        self,
        alias: str,
        version: str,
        out: Outcome,
        blocked: bool,
        failed_on: Iterable[tuple[str, str]],
    ) -> None:
        """One request: counted on ``version``; each failed attempt on the alias and version
        it failed on (``failed_on``, from the dispatcher: retries may have moved to another
        version, a fallback to another alias)."""
        now_ms = int(self._clock() * 1000)
        b = self._bucket(alias, version, now_ms)
        b.requests += 1
        failed = out.status >= 500
        failed_on = list(failed_on)
        for failed_alias, v in failed_on:
            f = self._bucket(failed_alias, v, now_ms)
            f.attempts += 1
            f.failed_attempts += 1
        if failed_on:
            b.attempts += 0 if failed else 1  # the attempt that answered
        else:
            attempts = max(out.attempts, 1)
            b.attempts += attempts
            b.failed_attempts += attempts if failed else attempts - 1
        if failed:
            b.errors += 1
            return
        if blocked:
            b.blocked += 1
        if out.status >= 400:
            return
        k = str(hist_bin(out.latency_s * 1000))
        b.latency[k] = b.latency.get(k, 0) + 1
        if out.ttft_s is not None:
            k = str(hist_bin(out.ttft_s * 1000))
            b.ttft[k] = b.ttft.get(k, 0) + 1
            first, last = out.first_token_at, out.last_token_at
            if first is not None and last is not None and out.completion_tokens > 1:
                k = str(hist_bin((last - first) * 1000 / (out.completion_tokens - 1)))
                b.tpot[k] = b.tpot.get(k, 0) + 1

    # ------------------------------------------------------------------ background
    async def aclose(self) -> None:
        await super().aclose()
        try:
            await asyncio.wait_for(self.flush(), timeout=2.0)
        except Exception as exc:  # the store is away at shutdown: these counts are lost
            log.debug("last outcome flush failed: %s", exc)

    async def flush(self) -> None:
        """Write the buckets that changed and the pending request rows."""
        now = self._clock()
        now_ms = int(now * 1000)
        dirty = [(k, b) for k, b in self._buckets.items() if b.dirty]
        rows = [
            {"alias": a, "version": v, "replica": self.replica, "bucket_ms": t,
             "requests": b.requests, "errors": b.errors, "attempts": b.attempts,
             "failed_attempts": b.failed_attempts, "blocked": b.blocked,
             "latency": dict(b.latency), "ttft": dict(b.ttft), "tpot": dict(b.tpot),
             "updated_ms": now_ms}
            for (a, v, t), b in dirty
        ]  # fmt: skip
        pending, self._pending = self._pending, []
        for row in pending:
            req = row.pop(_REQ, None)
            if req is not None:
                row["conversation"], row["prompt_hash"] = prompt_digests(req)
        if rows or pending:
            try:
                async with self.db.engine.begin() as conn:
                    if rows:
                        insert = pg_insert if self.db.dialect == "postgresql" else sqlite_insert
                        stmt = insert(release_outcomes)
                        cols = [c.name for c in release_outcomes.columns if not c.primary_key]
                        stmt = stmt.on_conflict_do_update(
                            index_elements=[c for c in release_outcomes.primary_key.columns],
                            set_={c: stmt.excluded[c] for c in cols},
                        )
                        await conn.execute(stmt, rows)
                    if pending:
                        await self.db.insert_ignore(release_requests, pending, conn)
            except BaseException:
                self._pending[:0] = pending  # keep them for the next try
                raise
            for _, b in dirty:
                b.dirty = False
        old = now_ms - 3 * BUCKET_MS  # a bucket no request can reach any more, once written
        for k in [k for k, b in self._buckets.items() if k[2] < old and not b.dirty]:
            del self._buckets[k]
        if now - self._last_purge > 600:
            self._last_purge = now
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    delete(release_outcomes).where(
                        release_outcomes.c.bucket_ms < now_ms - 7 * 86_400_000
                    )
                )
                await conn.execute(
                    delete(release_requests).where(
                        release_requests.c.created_ms < now_ms - int(self.retention_s * 1000)
                    )
                )


class ReleasesStage:
    """The releases feature's `fleetgate.contract.stages.Stage`: hands each outcome to the book."""

    name = "releases"

    def __init__(self, book: OutcomeBook) -> None:
        self.book = book

    async def before(self, req: GatewayRequest) -> None:
        return None

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.book.observe(req, outcome)
