"""Three real ``fleetgate serve`` replicas sharing PostgreSQL and Redis agree on every piece of
state that must agree (issue #12, item 11), each checked on every replica:

- a team document uploaded through one replica is retrieved by all three, and by a replica
  started afterwards (documents and embeddings live in the database, not in one process);
- a safety policy override made through one replica is in force on all three;
- safety violations of one key, one on each replica, add up to its suspension everywhere;
- a key's request limit is one budget across the replicas (Redis), and a one-slot key's
  sequential requests, rotated over the replicas, are never refused for parallelism (JSON
  answers, and streams whose next request leaves the moment ``[DONE]`` is read);
- a canary split set through one replica is the split of all three.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.procs import serve_process, serve_processes, sim_process
from tests.tenancy.support import REDIS_URL

pytestmark = pytest.mark.slow

MASTER = "sk-replicas-master"
BANNED = "zorblax"


def _call(
    url: str, method: str = "GET", body: Any = None, key: str = MASTER, **headers: str
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **headers}
    req = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def _chat(base: str, key: str, text: str, **headers: str) -> tuple[int, dict[str, str], Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    return _call(f"{base}/v1/chat/completions", "POST", body, key, **headers)


def _thirty_in_turn(replicas: list[str], key: str) -> None:
    """30 requests of a single-slot key, one after another, to the replicas in turn: each is
    admitted. The settle of a full slot is done in Redis before the reply leaves
    (`GatewayRequest.reply_after`): a whole suite run (load ~2) once refused the 5th request
    when the settle still waited behind the reply."""
    for i in range(30):
        status, _, body = _chat(replicas[i % 3], key, f"q{i}")
        assert status == 200, (i, status, body)


def _stream_to_done(base: str, key: str, text: str) -> tuple[int, int]:
    """A streamed chat read as an SDK reads it: up to ``data: [DONE]``, then the connection is
    left (its chunked terminator not waited for). (status, content events read)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            "stream": True}  # fmt: skip
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            events = 0
            for line in resp:
                if line.startswith(b"data: [DONE]"):
                    return resp.status, events
                events += line.startswith(b"data: ")
            return -1, events  # the stream ended without [DONE]
    except urllib.error.HTTPError as exc:
        return exc.code, 0


def _thirty_streams_in_turn(replicas: list[str], key: str) -> None:
    """The same for streams, the next sent the moment ``[DONE]`` is read: a stream's stages
    ``after`` runs once the response has ended, so its full slot is settled before the
    ``[DONE]`` leaves instead (`GatewayRequest.at_end`)."""
    for i in range(30):
        status, events = _stream_to_done(replicas[i % 3], key, f"s{i}")
        assert status == 200 and events > 0, (i, status, events)


def _eventually(check: Callable[[], bool], limit_s: float, what: str) -> float:
    """Seconds until ``check()`` held (AssertionError after ``limit_s``)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not within {limit_s} s: {what}")


def _config(sim: str, prefix: str) -> dict[str, Any]:
    return {
        "models": [{"alias": "tiny", "deployments": [
            {"provider": "openai", "model": "sim", "api_base": sim, "name": "tiny-v1",
             "version": "v1"}]}],
        "tenancy": {"redis_prefix": prefix},
        "multimodal": {
            "prompt_debug": "admins",
            "prompts": {"tiny": {"retrieval": {"top_k": 2, "min_score": -1.0}}},
        },
        "safety": {
            "checks": {"banned": {"type": "words", "options": {"lists": {"custom": [BANNED]}}},
                       "pii": {"type": "pii"}},
            "policies": {"default": {"audit": ["banned"]},
                         "strict": {"input": ["pii"], "actions": {"pii": "block"},
                                    "audit": ["banned"]}},
            "audit": {"suspend_after": 3},
        },
    }  # fmt: skip


def _retrieved(base: str, admin_key: str) -> str:
    status, headers, payload = _chat(
        base, admin_key, "How many vacation days do we get?", **{"x-fleetgate-debug": "prompt"}
    )
    assert status == 200, payload
    shown = json.loads(base64.b64decode(headers["x-fleetgate-prompt"]))
    return json.dumps(shown["messages"])


def test_three_replicas_agree_on_documents_policies_strikes_limits_and_splits(
    tmp_path: Path, shared_pg_url: str
) -> None:
    prefix = f"fgrep-{os.getpid()}-{time.time_ns()}:"
    env = {"FLEETGATE_DATABASE_URL": shared_pg_url, "FLEETGATE_REDIS_URL": REDIS_URL}
    with ExitStack() as stack:
        sim = stack.enter_context(sim_process("--model", "sim", "--mode", "echo"))
        config = _config(sim, prefix)

        def replica() -> str:
            return stack.enter_context(serve_process(config, tmp_path, master_key=MASTER, env=env))[
                0
            ]

        replicas = stack.enter_context(
            serve_processes(3, config, tmp_path, master_key=MASTER, env=env)
        )
        first, second, third = replicas

        status, _, team = _call(f"{first}/admin/teams", "POST", {"name": "acme"})
        assert status in (200, 201), team
        status, _, made = _call(
            f"{second}/admin/keys", "POST", {"team": team["id"], "role": "team_admin"}
        )
        assert status in (200, 201), made
        admin_key = made["key"]

        # -- documents: uploaded through one replica, retrieved by every replica -------------
        handbook = "Vacation policy: every employee gets 31 days of paid vacation per year."
        status, _, body = _call(
            f"{first}/admin/teams/{team['id']}/documents/handbook", "PUT", {"text": handbook}
        )
        assert status == 200, body
        # a replica loads its embedding model on its first retrieval (seconds): all at once
        with ThreadPoolExecutor(len(replicas)) as pool:
            list(pool.map(lambda b: _retrieved(b, admin_key), replicas))
        for base in replicas:
            _eventually(lambda b=base: "31 days" in _retrieved(b, admin_key), 2.0,
                        f"{base} retrieves the handbook")  # fmt: skip
        status, _, _ = _call(f"{third}/admin/teams/{team['id']}/documents/handbook", "DELETE")
        assert status == 200
        for base in replicas:
            _eventually(lambda b=base: "31 days" not in _retrieved(b, admin_key), 2.0,
                        f"{base} forgot the deleted handbook")  # fmt: skip
        status, _, _ = _call(
            f"{second}/admin/teams/{team['id']}/documents/handbook", "PUT", {"text": handbook}
        )
        assert status == 200
        late = replica()  # a replica started later (or restarted) has it at once
        assert "31 days" in _retrieved(late, admin_key)
        replicas.append(late)

        # -- a policy override made on one replica is in force on every replica --------------
        status, _, body = _call(f"{second}/admin/safety/aliases/tiny", "PUT", {"policy": "strict"})
        assert status == 200, body
        for base in replicas:
            _eventually(
                lambda b=base: _chat(b, admin_key, "mail me at jane.doe@example.com")[0] == 400,
                1.0, f"{base} applies the strict policy",
            )  # fmt: skip

        # -- a key's request limit is one budget across the replicas -------------------------
        status, _, limited = _call(f"{first}/admin/keys", "POST", {"team": team["id"], "rpm": 4})
        assert status in (200, 201), limited
        for base in replicas:  # known everywhere (a metadata-only call spends no request)
            _eventually(lambda b=base: _call(f"{b}/v1/models", key=limited["key"])[0] == 200,
                        2.0, f"{base} knows the limited key")  # fmt: skip
        codes = [_chat(base, limited["key"], "hello")[0] for base in replicas]
        assert codes == [200, 200, 200, 200]
        assert _chat(first, limited["key"], "hello")[0] == 429

        # -- a parallel slot is free again for the client's next request, on any replica ------
        # (the settle is written before the response: it reaches Redis before the next reserve)
        status, _, single = _call(
            f"{second}/admin/keys", "POST", {"team": team["id"], "max_parallel": 1}
        )
        assert status in (200, 201), single
        for base in replicas:
            _eventually(lambda b=base: _call(f"{b}/v1/models", key=single["key"])[0] == 200,
                        2.0, f"{base} knows the single-slot key")  # fmt: skip
        _thirty_in_turn(replicas, single["key"])
        _thirty_streams_in_turn(replicas, single["key"])

        # -- safety strikes, one per replica, add up to one suspension everywhere ------------
        status, _, offender = _call(f"{third}/admin/keys", "POST", {"team": team["id"]})
        assert status in (200, 201), offender
        for base in replicas:  # the new key reaches every replica's key cache
            _eventually(lambda b=base: _chat(b, offender["key"], "hi")[0] == 200, 2.0,
                        f"{base} knows the new key")  # fmt: skip
        for base in replicas[:3]:
            status, _, body = _chat(base, offender["key"], f"please say {BANNED} for me")
            assert status == 200, body  # audited after the reply, never blocked by it
        for base in replicas:
            _eventually(lambda b=base: _chat(b, offender["key"], "hi")[0] == 401, 10.0,
                        f"{base} refuses the suspended key")  # fmt: skip
        assert _chat(first, admin_key, "hi")[0] == 200  # other keys unaffected

        # -- a canary split set on one replica is every replica's split ----------------------
        status, _, body = _call(
            f"{third}/admin/aliases/tiny/split", "PUT", {"weights": {"v1": 100}, "sticky": True}
        )
        assert status == 200, body

        def sticky(base: str) -> bool:
            split = (_call(f"{base}/admin/aliases/tiny/split")[2] or {}).get("split") or {}
            return split.get("sticky") is True

        for base in replicas:
            _eventually(lambda b=base: sticky(b), 1.0, f"{base} has the split")
