"""Fuzzing request bodies: whatever a client sends, the gateway answers 2xx/4xx, never 5xx."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
    st.text(max_size=20),
)  # fmt: skip
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "x", ""]) | json_leaf},
    optional={"content": json_value, "name": json_value, "tool_calls": json_value,
              "tool_call_id": json_value},
)  # fmt: skip
chat_body = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", "other", ""]) | json_leaf},
    optional={
        "messages": st.lists(message, max_size=3) | json_value,
        "stream": json_value, "n": json_value, "max_tokens": json_value,
        "temperature": json_value, "tools": json_value, "tool_choice": json_value,
        "stream_options": json_value, "stop": json_value, "logit_bias": json_value,
        "response_format": json_value, "seed": json_value, "prompt": json_value,
        "input": json_value,
    },
)  # fmt: skip
raw_bytes = st.binary(max_size=64)


async def _post_all(client: Any, path: str, payloads: list[bytes]) -> list[int]:
    statuses = []
    for payload in payloads:
        resp = await client.post(path, data=payload, headers=AUTH)
        await resp.read()
        statuses.append(resp.status)
    return statuses


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    bodies=st.lists(chat_body, min_size=150, max_size=150),
    raws=st.lists(raw_bytes, min_size=30, max_size=30),
)
async def test_no_5xx_for_any_body(
    gateway: GatewayFactory, upstream: FakeUpstream, bodies: list[dict[str, Any]],
    raws: list[bytes],
) -> None:  # fmt: skip
    client = await gateway(one_alias(upstream))
    payloads = [orjson.dumps(b, option=orjson.OPT_NON_STR_KEYS) for b in bodies] + raws
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        statuses = await _post_all(client, path, payloads)
        assert all(s < 500 for s in statuses), sorted(set(statuses))
