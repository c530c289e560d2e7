"""Fuzzing ``/v1/responses``: whatever a client sends, the answer is 2xx/4xx, never 5xx."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
    st.text(max_size=12),
)  # fmt: skip
value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=10,
)  # fmt: skip
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "input_image", "input_file", "output_text", "x"])},
    optional={"text": value, "image_url": value, "file_data": value, "detail": value},
)  # fmt: skip
item = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", "function_call_output",
                                 "reasoning", "item_reference"]) | leaf,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | leaf,
        "content": st.lists(part, max_size=3) | value, "call_id": value, "name": value,
        "arguments": value, "output": value,
    },
)  # fmt: skip
body = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", "other"]) | leaf},
    optional={
        "input": st.lists(item, max_size=4) | value, "instructions": value, "stream": value,
        "store": value, "previous_response_id": st.just("resp_missing") | value,
        "max_output_tokens": value, "temperature": value, "top_p": value, "tools": value,
        "tool_choice": value, "text": value, "metadata": value, "user": value,
        "parallel_tool_calls": value,
    },
)  # fmt: skip


# Valid requests with one field made odd: they get past the first checks.
near_valid = st.builds(
    lambda text, extra: {"model": "tiny", "input": text, **extra},
    st.text(min_size=1, max_size=20),
    st.dictionaries(
        st.sampled_from(["stream", "store", "max_output_tokens", "temperature", "tools",
                         "tool_choice", "text", "metadata", "instructions", "user"]),
        value | st.just(True), max_size=1,
    ),
)  # fmt: skip


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    bodies=st.lists(body, min_size=100, max_size=100),
    near=st.lists(near_valid, min_size=60, max_size=60),
    ids=st.lists(st.text(), min_size=5, max_size=10),
)
async def test_no_5xx_for_any_body_or_id(
    gateway: GatewayFactory, upstream: FakeUpstream, bodies: list[dict[str, Any]],
    near: list[dict[str, Any]], ids: list[str],
) -> None:  # fmt: skip
    client = await gateway(one_alias(upstream))
    statuses = set()
    for b in [*bodies, *near]:
        resp = await client.post(
            "/v1/responses", data=orjson.dumps(b, option=orjson.OPT_NON_STR_KEYS), headers=AUTH
        )
        await resp.read()
        statuses.add(resp.status)
    for rid in ids:
        for method in ("GET", "DELETE"):
            resp = await client.request(
                method, f"/v1/responses/{rid.encode().hex()}x", headers=AUTH
            )
            await resp.read()
            statuses.add(resp.status)
    assert all(s < 500 for s in statuses), sorted(statuses)
