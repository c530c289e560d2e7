"""The Anthropic front door passes the tenancy stage: a virtual key sent as ``x-api-key`` is
limited and billed like on the chat route, and its 429 is Anthropic's rate-limit error."""

from __future__ import annotations

from pathlib import Path

import anthropic
from sqlalchemy import select

from fleetgate.tenancy.tables import spend
from tests.tenancy.support import running_gateway, wait_for


async def test_a_virtual_key_is_limited_and_billed_through_v1_messages(
    upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, key_id, key = await gw.team_and_key("claude-users", rpm=2)
        async with anthropic.AsyncAnthropic(base_url=gw.url, api_key=key, max_retries=0) as sdk:
            for _ in range(2):
                reply = await sdk.messages.with_raw_response.create(
                    model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
                assert reply.headers["x-ratelimit-limit-requests"] == "2"
                assert (await reply.parse()).usage.output_tokens > 0
            try:
                await sdk.messages.create(
                    model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
            except anthropic.RateLimitError as exc:
                assert exc.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
                assert int(exc.response.headers["retry-after"]) > 0
            else:
                raise AssertionError("the third request in a minute was not refused")

        async def billed() -> bool:
            async with gw.tenancy.db.engine.connect() as conn:
                rows = (await conn.execute(select(spend).where(spend.c.key_id == key_id))).all()
            return len(rows) == 2 and all(r.cost_nusd > 0 for r in rows)

        await wait_for(billed)
