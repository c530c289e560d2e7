"""``fleetgate plan --plot`` and ``fleetgate bench --html`` without matplotlib: one line naming
the ``bench`` extra, before any work is done."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleetgate.cli.main import main


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


@pytest.mark.usefixtures("no_matplotlib")
def test_plan_plot_names_the_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png, js = tmp_path / "plan.png", tmp_path / "plan.json"
    assert main(["plan", "--dau", "1000", "--plot", str(png), "--json", str(js)]) == 2
    out, err = capsys.readouterr()
    assert "fleetgate plan: plotting the plan (--plot) needs matplotlib" in err
    assert "pip install 'fleetgate[bench]'" in err
    assert out == "" and not png.exists() and not js.exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_plan_without_plot_needs_no_matplotlib(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--dau", "1000"]) == 0
    assert "GPUs" in capsys.readouterr().out


@pytest.mark.usefixtures("no_matplotlib")
def test_bench_html_names_the_extra_before_the_load_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nothing listens on port 9: had the load test started, the error would be another one
    url, html = "http://127.0.0.1:9/v1", tmp_path / "r.html"
    assert main(["bench", url, "--model", "m", "--steps", "1,2", "--html", str(html)]) == 2
    err = capsys.readouterr().err
    assert "fleetgate bench: the HTML report's plots (--html) needs matplotlib" in err
    assert "pip install 'fleetgate[bench]'" in err
    assert not html.exists()
