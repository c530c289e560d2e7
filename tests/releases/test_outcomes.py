"""The per-version outcome book: what the rollout analysis reads, summed over replicas, with
failed requests (even those no upstream answered) and the failed attempts retries hid."""

from __future__ import annotations

from pathlib import Path

from fleetgate.app import MIGRATIONS
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.releases.analysis import feedback_counts
from fleetgate.releases.feedback import FeedbackStore
from fleetgate.releases.flywheel import bad_cases
from fleetgate.releases.outcomes import PICKED, OutcomeBook
from fleetgate.releases.tables import release_requests
from fleetgate.releases.windows import BUCKET_MS, hist_percentile, read_window
from fleetgate.store.database import Database


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def request(n: int, alias: str = "chat", text: str = "hi") -> GatewayRequest:
    return GatewayRequest(
        request_id=f"r{n}", endpoint=Endpoint.CHAT, principal=Principal("k1", team_id="t1"),
        body={"messages": [{"role": "user", "content": text}]}, alias=alias, stream=False,
        want_usage=False, prompt_tokens=1, max_tokens=1, received_at=1000.0,
    )  # fmt: skip


def outcome(version: str | None, status: int = 200, attempts: int = 1, **kw: object) -> Outcome:
    out = Outcome(status=status, alias="chat", version=version, attempts=attempts,
                  latency_s=0.1, deployment=None if version is None else "d")  # fmt: skip
    for k, v in kw.items():
        setattr(out, k, v)
    return out


async def test_two_replicas_sum_and_failures_count(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    t0 = 1_000_000.0  # a bucket boundary (ms multiple of BUCKET_MS)
    clock = Clock(t0)
    chat = "chat".__eq__
    books = [OutcomeBook(db, replica=n, tracked=chat, recorded=chat, clock=clock)
             for n in ("a", "b")]  # fmt: skip
    try:
        a, b = books
        for i in range(8):  # replica a: 8 answered, 2 of them on a second attempt
            a.observe(request(i), outcome("v2", attempts=2 if i < 2 else 1))
        req = request(100)
        req.state[PICKED] = "v2"  # every attempt failed: no deployment answered
        a.observe(req, outcome(None, status=502, attempts=0))
        b.observe(request(101), outcome("v2", status=503, attempts=0))
        b.observe(request(102), outcome("v2", finish_reason="content_filter",
                                        ttft_s=0.05, first_token_at=1.0, last_token_at=1.2,
                                        completion_tokens=11))  # fmt: skip
        b.observe(request(103), outcome("v1"))
        b.observe(request(104, alias="other"), outcome("v2", alias="other"))  # not under a rollout
        b.observe(request(105), outcome("v2", status=499))  # the client left: not counted
        for book in books:
            await book.flush()
            await book.flush()  # idempotent: each replica replaces its own rows
        w = await read_window(db, "chat", "v2", int(t0 * 1000))
        assert (w.requests, w.errors, w.blocked) == (11, 2, 1)
        assert (w.attempts, w.failed_attempts) == (13, 4)  # 2 retried + 2 failed requests
        assert abs(w.error_rate - 4 / 13) < 1e-9
        assert w.ttft_samples == 1 and w.tpot_samples == 1
        assert 45 <= (w.ttft_p95_ms or 0) <= 56 and 18 <= (w.tpot_p95_ms or 0) <= 23
        assert (await read_window(db, "chat", "v1", int(t0 * 1000))).requests == 1
        assert (await read_window(db, "other", "v2", 0)).requests == 0
        # a window that begins after a bucket began does not count that bucket's requests
        assert (await read_window(db, "chat", "v2", int(t0 * 1000) + 1)).requests == 0
        clock.t = t0 + BUCKET_MS / 1000
        a.observe(request(200), outcome("v2"))
        await a.flush()
        later = await read_window(db, "chat", "v2", int(t0 * 1000) + 1)
        assert later.requests == 1 and later.errors == 0
        async with db.engine.connect() as conn:
            rows = (await conn.execute(release_requests.select())).all()
        assert len(rows) == 14 and {r.version for r in rows} >= {"v1", "v2"}
        assert next(r for r in rows if r.request_id == "r100").status == 502
    finally:
        await db.aclose()


def test_histogram_percentile() -> None:
    assert hist_percentile({}, 95) is None
    hist = {"0": 1, "48": 98, "72": 1}  # ~1 ms, ~97 ms, ~950 ms
    assert 90 < (hist_percentile(hist, 95) or 0) < 110
    assert (hist_percentile(hist, 100) or 0) > 900


async def test_regenerations_in_the_same_millisecond_count(db_url: str, tmp_path: Path) -> None:
    """The same prompt sent three times within one millisecond is two regenerations (the
    first two answers were asked again), in quality, the rollout's verdicts and the flywheel."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    chat = "chat".__eq__
    book = OutcomeBook(db, replica="a", tracked=chat, recorded=chat, clock=Clock(1000.0))
    try:
        for i in range(3):  # every request was received at the same instant
            book.observe(request(i, text="tell me a joke"), outcome("v1"))
        book.observe(request(9, text="something else"), outcome("v1"))
        await book.flush()
        (row,) = await FeedbackStore(db).quality(since_ms=0, alias="chat")
        assert (row["requests"], row["regenerations"]) == (4, 2)
        assert await feedback_counts(db, "chat", "v1", 0, 600.0) == (2, 2)
        items, skipped = await bad_cases(db, alias="chat", since_ms=0)
        assert len(items) + sum(skipped.values()) == 2  # no payload was logged: both skipped
    finally:
        await db.aclose()
