"""The performance leg: ``fleetgate eval perf`` puts fleetgate bench's load on a version and on
production through the gateway, stores both runs, and the TTFT gate judges them: a version with
three times the prefill time fails ``ttft_p95_ms <= 1.5x baseline``."""

from __future__ import annotations

import asyncio
import json
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

from fleetgate.cli.main import main
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, registry_config, running_gateway, version_body


def _main(argv: list[str]) -> tuple[int, str]:
    out = StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


async def test_perf_leg_feeds_the_ttft_gate(db_url: str, tmp_path: Path) -> None:
    fast = SimConfig(mode="echo", prefill_ms_per_token=1.0, decode_ms_per_step=1.0)
    slow = SimConfig(mode="echo", prefill_ms_per_token=3.0, decode_ms_per_step=1.0)
    async with running_sim(fast) as v1, running_sim(slow) as v2:
        cfg = registry_config(v1)
        cfg["releases"]["gates"] = {"chat": {"rules": [
            {"name": "ttft", "metric": "ttft_p95_ms", "max_ratio": 1.5}]}}  # fmt: skip
        async with running_gateway(cfg, tmp_path, db_url) as gw:
            await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
            for n, url in ((1, v1), (2, v2)):
                await gw.admin("POST", "/admin/registry/models/chat/versions",
                               json=version_body(url, n))  # fmt: skip
            status, _ = await gw.admin("POST", "/admin/registry/models/chat/promote",
                                       json={"stage": "production", "version": "v1",
                                             "force": True})  # fmt: skip
            assert status == 200
            argv = ["eval", "perf", "--target", "chat@v2", "--rate", "40", "--requests", "30",
                    "--input-len", "fixed:64", "--output-len", "fixed:8", "--url", gw.url,
                    "--key", MASTER, "-o", "json"]  # fmt: skip
            code, out = await asyncio.to_thread(_main, argv)
            assert code == 0, out
            got = json.loads(out)
            assert got["suite"].startswith("perf:rate=40,n=30,in=fixed:64")
            m = got["metrics"]
            assert m["error_rate"] == 0 and m["items"] == 30 and m["tpot_p95_ms"] > 0
            assert got["comparison"]["baseline_version"] == "v1"
            assert got["comparison"]["ratios"]["ttft_p95_ms"] > 1.5, got["comparison"]
            assert got["gate"]["verdict"] == "fail" and "ttft" in got["gate"]["reason"]
            for version in ("v1", "v2"):  # both runs stored, on the same load's digest
                _, runs = await gw.admin(
                    "GET", f"/admin/registry/models/chat/versions/{version}/evals"
                )
                assert [r["suite_digest"] for r in runs["data"]] == [got["suite_digest"]]
