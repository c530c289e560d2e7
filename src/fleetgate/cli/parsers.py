"""The shape every documented sub-command shares: its page is a docstring with line breaks."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_command"]


def add_command(sub: Any, name: str, help: str, description: str | None) -> argparse.ArgumentParser:
    """Add sub-command ``name`` to ``sub`` (an ``add_subparsers()`` result).

    ``help`` is its line in the parent's list; ``description`` (usually the module's
    ``__doc__``) is shown by ``--help`` as written, line breaks kept.
    """
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser
