"""``fleetgate epp``'s command line: refusals before anything starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from fleetgate.cli.main import main


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "fleetgate.yaml"
    path.write_text(yaml.safe_dump({"models": [{"alias": "chat", "deployments": [
        {"model": "tiny", "api_base": "http://127.0.0.1:9/v1"}]}]}))  # fmt: skip
    return path


def test_a_lease_without_redis_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLEETGATE_REDIS_URL", raising=False)
    code = main(["epp", "--config", str(_config(tmp_path)), "--data-dir", str(tmp_path),
                 "--lease-key", "pool-a"])  # fmt: skip
    assert code == 2
    assert "--lease-key needs FLEETGATE_REDIS_URL" in capsys.readouterr().err


def test_a_bad_config_is_refused_before_any_port_is_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [{alias: chat}]\n")
    assert main(["epp", "--config", str(bad), "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("fleetgate: ")


def test_without_the_extra_the_command_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    assert main(["epp", "--config", str(_config(tmp_path)), "--data-dir", str(tmp_path)]) == 2
    assert "pip install 'fleetgate[epp]'" in capsys.readouterr().err


@pytest.mark.parametrize("hold", ["0", "-1", "301", "nan"])
def test_a_wake_hold_out_of_range_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hold: str
) -> None:
    args = ["epp", "--config", str(_config(tmp_path)), "--data-dir", str(tmp_path)]
    assert main([*args, "--wake-hold-s", hold]) == 2
    assert "--wake-hold-s must be above 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("models", "extra", "said"),
    [
        ([{"alias": "chat", "deployments": [{"model": "tiny", "api_base": "http://a:1/v1"},
                                            {"model": "tiny", "api_base": "http://b:1/v1"}]}],
         [], "write exactly one deployment"),
        ([{"alias": "a", "deployments": [{"model": "t", "api_base": "http://a:1/v1"}]},
          {"alias": "b", "deployments": [{"model": "t", "api_base": "http://b:1/v1"}]}],
         [], "say which alias the pool serves"),
        ([{"alias": "chat", "deployments": [{"model": "t", "api_base": "http://a:1/v1"}]}],
         ["--pool-alias", "other"], "no such alias"),
    ],
)  # fmt: skip
def test_a_pool_without_one_template_is_refused_before_anything_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    models: list[object],
    extra: list[str],
    said: str,
) -> None:
    pytest.importorskip("kubernetes", reason="pip install 'fleetgate[kube]'")
    path = tmp_path / "fleetgate.yaml"
    path.write_text(yaml.safe_dump({"models": models}))
    args = ["epp", "--config", str(path), "--data-dir", str(tmp_path), "--pool-name", "p"]
    assert main([*args, *extra]) == 2
    assert said in capsys.readouterr().err


def test_pool_flags_without_a_pool_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["epp", "--config", str(_config(tmp_path)), "--data-dir", str(tmp_path)]
    assert main([*args, "--pool-alias", "chat"]) == 2
    assert "need --pool-name" in capsys.readouterr().err
