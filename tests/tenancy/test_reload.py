"""A config reload reaches tenancy: alias limits, policy and knobs apply without a restart."""

from __future__ import annotations

from pathlib import Path

from fleetgate.api.state import GATEWAY
from tests.tenancy.support import gateway_config, running_gateway


async def test_alias_limits_follow_a_config_reload(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None, alias_limits={"tiny": {"rpm": 2}}) as gw:
        _, _, key = await gw.team_and_key("reloaded")
        assert [(await gw.chat(key))[0] for _ in range(3)] == [200, 200, 429]
        tables = gw.app[GATEWAY].tables
        tables.apply(gateway_config(upstream, alias_limits={"tiny": {"rpm": 100}},
                                    spend_flush_interval_s=0.5, audit_requests=False))  # fmt: skip
        status, headers, _ = await gw.chat(key)
        assert status == 200 and headers["x-ratelimit-limit-requests"] == "100"
        assert gw.tenancy.writer.flush_interval_s == 0.5
        assert gw.tenancy.stage.audit_requests is False
        tables.apply(gateway_config(upstream))  # no alias limits at all
        status, headers, _ = await gw.chat(key)
        assert status == 200 and "x-ratelimit-limit-requests" not in headers
