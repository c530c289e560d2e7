"""``fleetgate monitoring export``: the files in deploy/monitoring are current and well-formed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetgate.cli.main import main
from fleetgate.cli.monitoring import metric_catalog, render
from fleetgate.telemetry.monitoring.dashboards import LAYERS

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "deploy" / "monitoring"


def test_committed_files_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitoring", "export", str(OUT), "--check"]) == 0, capsys.readouterr().err


def test_check_notices_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(OUT, tmp_path / "m")
    board = tmp_path / "m" / "dashboards" / "quality.json"
    board.write_text(board.read_text().replace("fleetgate_safety", "fleetgate_unsafe"))
    assert main(["monitoring", "export", str(tmp_path / "m"), "--check"]) == 1
    assert "quality.json" in capsys.readouterr().err
    assert main(["monitoring", "export", str(tmp_path / "m")]) == 0
    assert main(["monitoring", "export", str(tmp_path / "m"), "--check"]) == 0


def test_four_layers_with_descriptions_from_the_registry() -> None:
    files = render(metric_catalog())
    boards = {p: json.loads(t) for p, t in files.items() if p.endswith(".json")}
    assert set(boards) == {f"dashboards/{layer}.json" for layer in LAYERS}
    assert set(LAYERS) == {"infrastructure", "application", "quality", "business"}
    for board in boards.values():
        assert board["panels"]
        assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
        for panel in board["panels"]:
            assert panel["description"] and panel["targets"]
    ttft = next(
        p for p in boards["dashboards/application.json"]["panels"]
        if p["title"] == "Time to first token"
    )  # fmt: skip
    assert ttft["description"] == "Time to first token."  # the metric's HELP text
    rule = yaml.safe_load(files["prometheusrule.yaml"])
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(files["alerts.yaml"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Each panel query, as a recording rule, passes ``promtool check rules`` (valid PromQL)."""
    boards = [json.loads(p.read_text()) for p in sorted((OUT / "dashboards").glob("*.json"))]
    exprs = [t["expr"] for b in boards for p in b["panels"] for t in p["targets"]]
    rules = [
        {"record": f"fleetgate:dashboard_query_{i}", "expr": e.replace("$__rate_interval", "5m")}
        for i, e in enumerate(exprs)
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout
