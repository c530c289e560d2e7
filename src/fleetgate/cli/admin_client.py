"""What the ``teams``, ``keys`` and ``spend`` sub-commands share: the admin API client and
table / CSV / JSON output."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from fleetgate.csv_export import csv_text
from fleetgate.errors import ConfigError

__all__ = ["add_client_args", "call", "client_command", "render"]


def add_client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("FLEETGATE_URL", "http://127.0.0.1:4000"),
        help="gateway base URL (env FLEETGATE_URL)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("FLEETGATE_API_KEY") or os.environ.get("FLEETGATE_MASTER_KEY"),
        help="admin key (env FLEETGATE_API_KEY or FLEETGATE_MASTER_KEY)",
    )
    parser.add_argument("--output", "-o", choices=("table", "csv", "json"), default="table")


def client_command(actions: Any, name: str, **options: Any) -> argparse.ArgumentParser:
    """A subcommand of ``actions`` (an ``add_subparsers`` result) that calls the admin API:
    ``--url``, ``--key`` and ``--output`` come with it; ``options`` go to ``add_parser``."""
    parser: argparse.ArgumentParser = actions.add_parser(name, **options)
    add_client_args(parser)
    return parser


def call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One admin API call; an error answer becomes a `ConfigError` with its message."""
    if not args.key:
        raise ConfigError("no admin key: pass --key or set FLEETGATE_MASTER_KEY")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        args.url.rstrip("/") + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {args.key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = str(exc)
        raise ConfigError(f"{method} {path}: {exc.code} {message}") from None
    except urllib.error.URLError as exc:
        raise ConfigError(f"cannot reach {args.url}: {exc.reason}") from None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def render(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Rows as an aligned table, CSV or JSON."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2, sort_keys=True)
    cols = list(columns or (list(rows[0].keys()) if rows else []))
    if fmt == "csv":
        text = csv_text(cols, ([_cell(r.get(c)) for c in cols] for r in rows), lineterminator="\n")
        return text.rstrip("\n")
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)
