"""Tenant quota through the multimodal stage: one team flooding the cache keeps the other's."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from tests.multimodal.images.conftest import make_png
from tests.resources.support import resources

from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.multimodal.config import MultimodalConfig
from fleetgate.multimodal.images.process import ImageProcessor
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.stage import MultimodalStage
from fleetgate.resources import Resources
from fleetgate.routing.table import RouteTable

__all__ = ["resources"]


def _request(team: str, url: str) -> GatewayRequest:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}}]
    return GatewayRequest(
        request_id="r",
        endpoint=Endpoint.CHAT,
        principal=Principal(key_id=f"k-{team}", team_id=team),
        body={"model": "tiny", "messages": [{"role": "user", "content": parts}]},
        alias="tiny",
        stream=False,
        want_usage=False,
        prompt_tokens=0,
        max_tokens=0,
    )


def _no_table() -> RouteTable:
    raise AssertionError("no prompt assembly here: the route table is not consulted")


def _url(i: int) -> str:
    return "data:image/png;base64," + base64.b64encode(make_png(color=(i, 7, 7))).decode()


async def test_one_team_flooding_the_cache_does_not_evict_the_others(
    tmp_path: Path, resources: Resources
) -> None:
    size = ImageProcessor().process(make_png(color=(1, 7, 7))).nbytes
    cfg = MultimodalConfig.model_validate(
        {"images": {"cache": {"max_bytes": 4 * size + 8, "tenant_quota_bytes": 2 * size + 4}}}
    )
    runtime = MultimodalRuntime(cfg, Settings(data_dir=tmp_path), resources=resources)
    stage = MultimodalStage(runtime, _no_table)
    for i in (1, 2):
        await stage.before(_request("team-a", _url(i)))
    for i in range(10, 20):
        await stage.before(_request("team-b", _url(i)))
    decodes = runtime.images.decodes
    assert decodes == 12
    for i in (1, 2):
        await stage.before(_request("team-a", _url(i)))
    assert runtime.images.decodes == decodes  # team A's images were still cached
    assert runtime.cache.tenant_bytes("team-b") <= 2 * size + 4 + size
    await runtime.aclose()
