"""``fleetgate safety``: the command comes from the tooling distribution (an entry point)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.cli.main import build_parser, main
from fleetgate_training.safety import cli as tooling_cli


def test_safety_eval_is_the_installed_toolings_command() -> None:
    args = build_parser().parse_args(["safety", "eval", "--model", "m"])
    assert args.func is tooling_cli.run and args.model == "m"


def test_without_the_tooling_safety_eval_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def none_installed(group: str) -> list[Any]:
        return []

    monkeypatch.setattr("fleetgate.cli.safety.entry_points", none_installed)
    assert main(["safety", "eval", "--model", "m", "--json"]) == 2
    err = capsys.readouterr().err
    assert "fleetgate-training" in err and "pip install -e training" in err
