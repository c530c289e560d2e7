"""Every CSV the package writes is safe to open in a spreadsheet (finding 12 of #31: cells
starting with TAB or CR were not neutralised), through one helper, `fleetgate.csv_export`."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from fleetgate.bench.report import write_csv
from fleetgate.cli.admin_client import render
from fleetgate.csv_export import csv_text, inert_cell, restore_cell
from fleetgate.plan.history import HourlyHistory, read_history_csv, write_history_csv

HOSTILE = ("=HYPERLINK(\"http://x\")", "+1+1", "-1+cmd|' /C calc'!A0", "@SUM(A1)",
           "\t=1+1", "\r=1+1", "\n=1+1", "\uff1d1+1", "'=1+1", "''\t=2")  # fmt: skip
PLAIN = ("team", "", "-3.5", "+2", "1e-05", "-0.25E+3", "search=prod", "'quoted", "a=b")


@pytest.mark.parametrize("text", HOSTILE)
def test_a_cell_a_spreadsheet_would_run_is_marked_as_text(text: str) -> None:
    cell = inert_cell(text)
    assert cell == "'" + text
    assert restore_cell(cell) == text


@pytest.mark.parametrize("text", PLAIN)
def test_numbers_and_plain_text_are_kept(text: str) -> None:
    assert inert_cell(text) == text and restore_cell(text) == text


def test_values_that_are_not_text() -> None:
    assert [inert_cell(v) for v in (None, -3, 2.5, True)] == ["", "-3", "2.5", "True"]
    text = csv_text(["a", "b"], [["\t=1", -1], ["x", None]])
    assert list(csv.reader(io.StringIO(text))) == [["a", "b"], ["'\t=1", "-1"], ["x", ""]]


def test_the_admin_clients_csv_output_is_inert() -> None:
    rows = [{"team_name": "\t=cmd()", "spend_usd": -1.5}, {"team_name": "\r@x", "spend_usd": 2}]
    cells = list(csv.reader(io.StringIO(render(rows, "csv"), newline="")))
    assert cells == [["team_name", "spend_usd"], ["'\t=cmd()", "-1.5"], ["'\r@x", "2"]]


def test_the_planning_history_csv_is_inert_and_reads_back_the_same() -> None:
    aliases = ["=cmd()", "\tchat", "chat"]
    series = {a: {f: np.array([1.0, 2.0]) for f in ("requests", "input_tokens",
                                                  "output_tokens")} for a in aliases}  # fmt: skip
    history = HourlyHistory(1000, 2, series)
    text = write_history_csv(history)
    cells = [r["alias"] for r in csv.DictReader(io.StringIO(text, newline=""))]
    assert set(cells) == {"'=cmd()", "'\tchat", "chat"}
    assert sorted(read_history_csv(text).aliases) == sorted(aliases)


def test_the_load_generators_csv_is_inert(tmp_path: Path) -> None:
    from fleetgate.bench.report import POINT_COLUMNS

    class Point:
        summary = {c: ("=cmd()" if i == 0 else -1.5) for i, c in enumerate(POINT_COLUMNS)}
        records: list[object] = []

    path = tmp_path / "out.csv"
    write_csv(path, [Point(), Point()])  # type: ignore[list-item]
    rows = list(csv.DictReader(io.StringIO(path.read_text(), newline="")))
    assert rows[0][POINT_COLUMNS[0]] == "'=cmd()" and rows[0][POINT_COLUMNS[1]] == "-1.5"
