"""The releases feature's own tables (migration ``0008_releases_outcomes``).

- ``fg_release_outcomes``: what each replica saw of each version of an alias under rollout, per
  time bucket: requests, failed requests, upstream attempts and failed attempts (a request the
  dispatcher retried counts every failed try), output guardrail blocks, and sparse histograms
  of latency, TTFT and TPOT. One row per (alias, version, replica, bucket); only its replica
  writes it (replacing it with its running totals), so replicas never contend and the rollout
  analysis sums the rows of every replica.
- ``fg_release_requests``: one row per request on an alias that follows the registry: the
  response id the client got, alias, version, key, team, a digest of the conversation and of
  the prompt (regenerations: the same prompt asked again), status and whether an output
  guardrail blocked it. Feedback by ``response_id`` resolves through it; the flywheel export
  joins it with the request audit's payloads.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Index, Integer, String, Table

from fleetgate.store.tables import metadata

__all__ = ["release_outcomes", "release_requests"]

release_outcomes = Table(
    "fg_release_outcomes",
    metadata,
    Column("alias", String(200), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("replica", String(64), primary_key=True),
    Column("bucket_ms", BigInteger, primary_key=True),
    Column("requests", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("failed_attempts", Integer, nullable=False),
    Column("blocked", Integer, nullable=False),
    Column("latency", JSON, nullable=False),  # {bin: count} (`fleetgate.releases.outcomes`)
    Column("ttft", JSON, nullable=False),
    Column("tpot", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_fg_release_outcomes_time", "alias", "version", "bucket_ms"),
)

release_requests = Table(
    "fg_release_requests",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("response_id", String(200)),
    Column("created_ms", BigInteger, nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
    Column("key_id", String(40)),
    Column("team_id", String(40)),
    Column("conversation", String(64), nullable=False),
    Column("prompt_hash", String(64), nullable=False),
    Column("status", Integer, nullable=False),
    Column("blocked", Boolean, nullable=False),
    Index("ix_fg_release_requests_response", "response_id"),
    Index("ix_fg_release_requests_time", "alias", "created_ms"),
    Index("ix_fg_release_requests_prompt", "key_id", "prompt_hash", "created_ms"),
)
