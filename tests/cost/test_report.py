"""The ledger's accounting and the report's figures and recommendations, on known ticks."""

from __future__ import annotations

import pytest

from fleetgate.cost.config import CostConfig
from fleetgate.cost.dcgm import GpuSample
from fleetgate.cost.ledger import CostLedger
from fleetgate.cost.report import pool_report, team_rows


def _gpus(*utils: float) -> list[GpuSample]:
    return [
        GpuSample(
            uuid=f"GPU-{i}",
            gpu=str(i),
            model="H100",
            host="n",
            util_pct=u,
            fb_used_mib=72000.0,
            fb_free_mib=8000.0,
        )  # fmt: skip
        for i, u in enumerate(utils)
    ]


CFG = CostConfig.model_validate({
    "gpu_price_per_hour": 2.0, "scrape_interval_s": 60, "idle_below_util_pct": 5,
    "target_util_pct": 50, "pools": [{"alias": "chat", "dcgm": ["http://x:9400/metrics"]},
                                     {"alias": "idle", "dcgm": ["http://y:9400/metrics"],
                                      "gpu_price_per_hour": 4.0, "min_gpus": 0}],
})  # fmt: skip


def test_ledger_counts_idle_gpu_hours_and_skips_gaps() -> None:
    ledger = CostLedger(window_s=10 * 3600)
    t = 1_000_000.0
    for i in range(60):  # one hour at one tick a minute: GPU 0 at 80 %, GPU 1 idle, GPU 2 at 40
        ledger.add("chat", _gpus(80, 0, 40), engine_inflight=2.0 if i % 2 else 0.0,
                   at=t + 60 * i, interval_s=60, idle_pct=5)  # fmt: skip
    # a three-hour gap (scrapes failed): counted as three intervals at most, not three hours
    ledger.add("chat", _gpus(80, 0, 40), engine_inflight=1.0, at=t + 60 * 59 + 3 * 3600,
               interval_s=60, idle_pct=5)  # fmt: skip
    row = pool_report(CFG, ledger, CFG.pools[0], since=0)
    hours = (60 * 60 + 180) / 3600
    assert row["observed_hours"] == pytest.approx(hours)
    assert row["gpu_hours"] == pytest.approx(3 * hours)
    assert row["busy_gpu_hours"] == pytest.approx(1.2 * hours)
    assert row["utilisation"] == pytest.approx(0.4)
    assert row["idle_gpu_hours"] == pytest.approx(hours)
    assert row["cost_usd"] == pytest.approx(3 * hours * 2.0)
    assert row["idle_cost_per_month_usd"] == pytest.approx(2.0 * 720)  # one idle GPU all month
    assert row["engine_idle_fraction"] == pytest.approx(30 * 60 / (3600 + 180))
    assert row["memory_used_fraction"] == pytest.approx(0.9)
    rec = row["recommendation"]
    # p95 busy 1.2 GPU-equivalents at a 50 % target: 3 GPUs needed, none to release
    assert (rec["action"], rec["needed_gpus"], rec["reclaim_gpus"]) == ("keep", 3, 0)


def test_recommendations_release_scale_to_zero_and_wait() -> None:
    ledger = CostLedger(window_s=3600)
    for i in range(20):
        ledger.add("chat", _gpus(20, 10, 0, 0), engine_inflight=1.0, at=100.0 + 60 * i,
                   interval_s=60, idle_pct=5)  # fmt: skip
        ledger.add("idle", _gpus(0, 1), engine_inflight=0.0, at=100.0 + 60 * i, interval_s=60,
                   idle_pct=5)  # fmt: skip
    chat = pool_report(CFG, ledger, CFG.pools[0], since=0)["recommendation"]
    assert (chat["action"], chat["needed_gpus"], chat["reclaim_gpus"]) == ("release", 1, 3)
    assert chat["savings_per_month_usd"] == pytest.approx(3 * 2.0 * 720)
    idle = pool_report(CFG, ledger, CFG.pools[1], since=0)
    assert idle["recommendation"]["action"] == "scale_to_zero"
    assert idle["recommendation"]["reclaim_gpus"] == 2
    assert idle["idle_cost_usd"] == pytest.approx(idle["gpu_hours"] * 4.0)
    # the window can be narrowed: five ticks are too few to judge
    late = pool_report(CFG, ledger, CFG.pools[0], since=100.0 + 60 * 15)
    assert late["recommendation"]["action"] == "wait"
    # old ticks leave the window
    ledger.add("chat", _gpus(20, 10, 0, 0), engine_inflight=1.0, at=100.0 + 60 * 80,
               interval_s=60, idle_pct=5)  # fmt: skip
    assert len(ledger.ticks("chat", 0)) == 1


def test_team_rows_share_cost_by_tokens() -> None:
    pools = [{"pool": "chat", "cost_usd": 100.0, "idle_cost_usd": 40.0, "idle_gpu_hours": 10.0}]
    tokens = {("t1", "chat"): 300, ("t2", "chat"): 100, (None, "chat"): 0, ("t1", "gone"): 5}
    rows = team_rows(pools, tokens, {"chat": 400}, {"t1": "search", "t2": "ads"})
    by = {r["team"]: r for r in rows}
    assert set(by) == {"t1", "t2", None}
    assert by["t1"]["share"] == 0.75 and by["t1"]["cost_usd"] == 75.0
    assert by["t1"]["team_name"] == "search"
    assert by["t2"]["idle_cost_usd"] == 10.0 and by["t2"]["idle_gpu_hours"] == 2.5
