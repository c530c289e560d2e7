"""CSV cells a spreadsheet opens as text, never as a formula (CSV injection).

Excel, LibreOffice and Google Sheets run a cell that starts with ``=``, ``+``, ``-`` or ``@``
as a formula, and some also one that starts with a TAB or a carriage return (they strip it,
then see the ``=``); full-width ``＝ ＋ － ＠`` count in some locales. Such a cell gets a
leading ``'`` (shown by no spreadsheet, it marks the cell as text); a plain number such as
``-3.5`` stays a number. Every CSV the package writes goes through `inert_cell` (the console's
spend download, ``fleetgate admin -o csv``, the planning history, the load generator's
records); `restore_cell` undoes it for a CSV the package reads back (the planning history).

Example::

    inert_cell("=HYPERLINK(...)")  # "'=HYPERLINK(...)"
    inert_cell("\\t=1+1")           # "'\\t=1+1"
    inert_cell(-3.5)               # "-3.5"
    restore_cell(inert_cell(x)) == ("" if x is None else str(x))
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

__all__ = ["FORMULA_STARTS", "csv_text", "inert_cell", "restore_cell"]

FORMULA_STARTS = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _runs(text: str) -> bool:
    """Whether a spreadsheet could run ``text`` (a plain number it reads as a number)."""
    return text[:1] in FORMULA_STARTS and _NUMBER.fullmatch(text) is None


def inert_cell(value: Any) -> str:
    """``value`` as a CSV cell that no spreadsheet runs. A text that already starts with ``'``
    before such a start gets one more, so that `restore_cell` gives back exactly the text."""
    text = "" if value is None else str(value)
    return "'" + text if _runs(text.lstrip("'")) else text


def restore_cell(cell: str) -> str:
    """The text `inert_cell` was given (for reading back a CSV the package wrote)."""
    return cell[1:] if cell[:1] == "'" and _runs(cell.lstrip("'")) else cell


def csv_text(
    header: Sequence[Any], rows: Iterable[Sequence[Any]], *, lineterminator: str = "\r\n"
) -> str:
    """A CSV document of ``header`` and ``rows``, every cell made inert.

    Records end in ``lineterminator``; a cell holding a CR or LF is quoted whatever it is (the
    `csv` module quotes only the characters of its own line terminator: with ``"\n"`` a CR
    inside a cell would be left bare and split the record in a reader).
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")  # so cells with CR or LF are quoted
    out = []
    for row in chain([header], rows):
        buf.seek(0)
        buf.truncate()
        writer.writerow([inert_cell(v) for v in row])
        out.append(buf.getvalue()[:-2] + lineterminator)
    return "".join(out)
