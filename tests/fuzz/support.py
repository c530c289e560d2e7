"""The gateway the route fuzz runs against (every feature that adds routes on), the valid body
of each route it knows, and the check of a run: no 5xx, no stalled event loop."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.api.fuzz_support import send
from tests.conftest import MASTER
from tests.fuzz.cases import Case
from tests.fuzz.lag import ticking

__all__ = ["GENERIC", "Run", "everything_on", "run_cases", "valid_bodies", "version_body"]

STALL_S = 0.100
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
GENERIC = {"model": "tiny", "name": "n", "input": "hi"}  # the body of a route not listed


def everything_on(upstream: str) -> dict[str, Any]:
    """A config with every feature that adds routes: tenancy, safety, canary versions,
    kv-aware routing, retrieval, conversations, caches, registry aliases, the console, GPU
    cost, MCP (its server unreachable), batches and responses (on by default), insights,
    disclosure and idle reclaim."""
    dep = {"provider": "openai", "model": "m", "api_base": upstream}
    versions = [{**dep, "version": "v1"}, {**dep, "version": "v2"}]
    return {
        "models": [
            {"alias": "tiny", "deployments": versions, "cache": {"exact": True}},
            {"alias": "chat", "strategy": "kv-aware", "deployments": [dep]},
            {"alias": "reg", "registry": {"model": "reg", "stage": "production"}},
            {"alias": "idle", "deployments": [{**dep, "name": "idle-a", "wake": {"hold_s": 1}}]},
        ],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05},
        "safety": {
            "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
            "policies": {"default": {"input": ["words"]}, "strict": {"input": ["words", "pii"]}},
        },
        "multimodal": {
            "conversations": {"enabled": True},
            "prompts": {"tiny": {"retrieval": {"top_k": 1}}},
        },
        "mcp": {
            # nothing listens there: start-up waits for its first attempt, at most
            # connect_timeout_s (0.5 s here, should the attempt hang rather than fail)
            "servers": {
                "notes": {
                    "transport": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "connect_timeout_s": 0.5,
                }
            },
            "reconnect_s": 30,
        },
        "insights": {},
        "reclaim": {"window_s": 3600, "pools": [{"deployment": "idle-a"}]},
        "disclosure": {"model_name": "Fuzz Model", "filing_number": "F-0001"},
        "extensions": {
            "console": {},
            "cost": {
                "gpu_price_per_hour": 2.5,
                "scrape_interval_s": 30,
                "pools": [{"alias": "chat", "dcgm": ["http://127.0.0.1:9/metrics"]}],
            },
        },
    }


def version_body(version: str, upstream: str) -> dict[str, Any]:
    deployment = {"provider": "openai", "model": "m", "api_base": upstream}
    return {"version": version, "artifact_uri": "s3://m", "deployments": [deployment]}


def valid_bodies(team: str, file_id: str, upstream: str) -> dict[tuple[str, str], dict[str, Any]]:
    """A valid body per route (by method and template); a route not here gets `GENERIC`."""
    key = {"team": team, "role": "user", "aliases": ["tiny"], "rpm": 60, "tags": {"app": "x"}}
    evals = {"suite": "s", "suite_digest": "0123456789abcdef", "metrics": {"acc": 0.5}}
    batch = {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
             "completion_window": "24h", "metadata": {"a": "b"}}  # fmt: skip
    registry = "/admin/registry/models/{model}"
    return {
        ("POST", "/v1/chat/completions"): CHAT,
        ("POST", "/v1/completions"): {"model": "tiny", "prompt": "hi", "max_tokens": 4},
        ("POST", "/v1/embeddings"): {"model": "tiny", "input": "hi"},
        ("POST", "/v1/messages"): {**CHAT, "max_tokens": 4},
        ("POST", "/v1/messages/count_tokens"): CHAT,
        ("POST", "/v1/responses"): {"model": "tiny", "input": "hi", "store": True},
        ("POST", "/v1/feedback"): {"request_id": "req-1", "rating": "up", "comment": "ok"},
        ("POST", "/v1/batches"): batch,
        ("POST", "/v1/audio/speech"): {"model": "tiny", "input": "hi", "voice": "alloy"},
        ("POST", "/admin/teams"): {"name": "t", "rpm": 10, "tags": {"a": "b"}},
        ("POST", "/admin/users"): {"team": team, "name": "u"},
        ("POST", "/admin/keys"): key,
        ("POST", "/admin/config/reload"): {},
        ("PUT", "/admin/safety/policies/{name}"): {"input": ["words"], "canned_reply": "no"},
        ("PUT", "/admin/safety/aliases/{target}"): {"policy": "strict"},
        ("PUT", "/admin/safety/teams/{target}"): {"policy": "default"},
        ("PUT", "/admin/aliases/{alias}/split"): {"weights": {"v1": 90, "v2": 10}},
        ("POST", "/admin/routing/prewarm"): {"alias": "chat", "messages": CHAT["messages"]},
        ("PUT", "/admin/teams/{team}/documents/{doc_id}"): {"text": "Vacation: 27 days."},
        ("POST", "/admin/registry/models"): {"name": "reg2", "description": "d"},
        ("POST", f"{registry}/versions"): version_body("v3", upstream),
        ("POST", f"{registry}/promote"): {"stage": "production", "version": "v1"},
        ("POST", f"{registry}/versions/{{version}}/evals"): evals,
        ("POST", "/admin/registry/rollouts"): {"alias": "reg", "to": "v1"},
        ("POST", "/ui/login"): {"key": MASTER},
        ("POST", "/ui/playground/chat"): CHAT,
        ("POST", "/mcp"): {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    }


@dataclass
class Run:
    """What a run of cases found: answers >= 500, requests that stalled the loop (label ->
    seconds), and the answers' statuses."""

    errors: list[str] = field(default_factory=list)
    stalls: dict[str, float] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)
    unconfirmed: int = 0  # stalls that did not come back when sent again alone

    def report(self) -> str:
        lines = [f"{len(self.errors)} answers >= 500:", *self.errors[:60]]
        lines += [f"stalled the loop: {k} ({v * 1000:.0f} ms)" for k, v in self.stalls.items()]
        return "\n".join(lines)


async def _send_all(port: int, cases: list[Case], run: Run) -> dict[str, float]:
    async with ticking() as ticker:
        for case in cases:
            ticker.current = case.label
            answer = await send(port, case.request)
            await ticker.flush()  # a stall at the end of the handler is this request's
            ticker.current = ""
            run.statuses[answer.status] += 1
            if answer.status >= 500:
                run.errors.append(f"{case.label} -> {answer.status}: {answer.body[:200]!r}")
    return ticker.over(STALL_S)


async def run_cases(port: int, cases: list[Case]) -> Run:
    """Send each case in turn (one at a time, so a stall belongs to one request). A request
    that stalled the loop is sent again alone: a stall that comes back is the gateway's, one
    that does not was the machine (other processes on its cores)."""
    run = Run()
    stalls = await _send_all(port, cases, run)
    if stalls:
        again = [c for c in cases if c.label in stalls]
        confirmed = await _send_all(port, again, Run())
        run.stalls = {k: max(stalls[k], v) for k, v in confirmed.items()}
        run.unconfirmed = len(stalls) - len(confirmed)
    return run
