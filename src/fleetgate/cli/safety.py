"""``fleetgate safety ...``: commands that come with the tooling, not with the runtime.

``fleetgate safety eval`` (red-team and benign sets through a gateway or a policy) belongs to
the ``fleetgate-training`` distribution (``training/`` in the repository), with the prompt sets
it runs. That distribution registers the command under the entry point group ``fleetgate.cli``
as ``safety`` (a ``register(sub)`` callable, as every built-in sub-command module has), the
way simonw/llm finds its plug-ins' commands; the runtime imports no tooling module by name.
Without it installed, ``fleetgate safety ...`` says how to install it and exits with 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, cast

__all__ = ["COMMANDS", "INSTALL", "register"]

COMMANDS = "fleetgate.cli"  # the entry point group; this command's name in it is "safety"
INSTALL = "pip install -e training (the fleetgate-training distribution in fleetgate's repository)"


def _tooling() -> Callable[[Any], None] | None:
    found = [ep for ep in entry_points(group=COMMANDS) if ep.name == "safety"]
    return cast(Callable[[Any], None], found[0].load()) if found else None


def _missing(args: argparse.Namespace) -> int:
    print(f"fleetgate safety: the safety tools (eval) need fleetgate-training: {INSTALL}",
          file=sys.stderr)  # fmt: skip
    return 2


def register(sub: Any) -> None:
    """Add the tooling's ``safety`` command to ``sub``, or one that says how to install it."""
    tooling = _tooling()
    if tooling is not None:
        tooling(sub)
        return
    parser = sub.add_parser("safety", help="safety tools (install fleetgate-training)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=_missing)
