"""``fleetgate``: parse the command line, hand the sub-command its arguments."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fleetgate.cli.logs import configure as configure_logging
from fleetgate.errors import ConfigError, MissingExtra

__all__ = ["build_parser", "main"]

# Each module exposes register(sub) adding its parser with set_defaults(func=run).
SUBCOMMANDS = (
    "serve", "up", "sim", "config", "bench", "plan", "safety", "teams", "keys", "spend",
    "audit", "models", "eval", "rollout", "flywheel", "db", "monitoring", "cost", "imports",
    "kube", "epp", "reconcile", "pipeline", "insights",
)  # fmt: skip


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names, if it is one of ``SUBCOMMANDS`` (else None)."""
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--log-level":
            rest = rest[1:]
        elif not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
        elif arg in ("-h", "--help"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` that one sub-command's parser: a command
    imports its own module, not all of them (``fleetgate sim`` starts in a fraction of the
    time importing the gateway's features takes, which every engine start of a release
    pipeline used to pay)."""
    parser = argparse.ArgumentParser(prog="fleetgate", description="LLM gateway and platform")
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="fleetgate's log level: DEBUG, INFO, WARNING, ERROR (libraries log warnings "
        "only, unless DEBUG or FLEETGATE_LIBRARY_LOG_LEVEL is set)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"fleetgate.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fleetgate.cli.{name}":
                continue  # that sub-command is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(args_list))
    args = parser.parse_args(args_list)
    configure_logging(args.log_level)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except (ConfigError, MissingExtra) as exc:
        print(f"fleetgate: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
