"""Read metric and label names out of a PromQL expression (enough of PromQL for our queries).

Example::

    >>> sorted(names('sum by (alias) (rate(fleetgate_requests_total{status="500"}[5m]))').metrics)
    ['fleetgate_requests_total']
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Names", "names"]

# An unclosed string runs to the end (else each later quote would rescan the rest: quadratic).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|["\'](?s:.*)')
_MATCHERS = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)", re.IGNORECASE
)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
     "group_left", "group_right", "inf", "nan"}
)  # fmt: skip


@dataclass(frozen=True)
class Names:
    """The metric names a query selects and the label names it matches or groups on."""

    metrics: frozenset[str]
    labels: frozenset[str]


def _label_names(text: str) -> set[str]:
    return {m.group(0) for m in _IDENT.finditer(text)} - _KEYWORDS


def names(expr: str) -> Names:
    """The metric names and label names in ``expr`` (functions and keywords are left out)."""
    text = _STRING.sub('""', expr)
    labels: set[str] = set()
    for match in _MATCHERS.finditer(text):
        labels |= {part.split("=")[0].split("!")[0].strip() for part in match.group(1).split(",")}
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    for match in _GROUPING.finditer(text):
        labels |= _label_names(match.group(2))
    text = _GROUPING.sub(" ", text)
    metrics: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        rest = text[match.end() :].lstrip()
        if word.lower() in _KEYWORDS or rest.startswith("("):
            continue  # a function, an aggregation or an operator keyword
        before = text[: match.start()]
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # the exponent or unit of a number (1e3)
        metrics.add(word)
    return Names(frozenset(metrics), frozenset(label for label in labels if label))
