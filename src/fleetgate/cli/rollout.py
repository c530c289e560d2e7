"""``fleetgate rollout start|status|pause|resume|abort``: progressive rollouts of an alias that
follows a registry production stage, through the admin API (master key).

Example::

    fleetgate rollout start chat --to v8 --steps 10,50,100 --interval 5m --min-samples 200
    fleetgate rollout status chat
    fleetgate rollout abort chat
"""

from __future__ import annotations

import argparse
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render
from fleetgate.errors import ConfigError

__all__ = ["duration_s", "register", "run"]

_BASE = "/admin/registry/rollouts"
_COLUMNS = ("alias", "status", "baseline", "candidate", "percent", "step", "steps", "reason")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float:
    """``"5m"`` -> 300.0; ``"90s"``, ``"1.5h"``, ``"250ms"``, or plain seconds."""
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _UNITS[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 5m)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return value


def _steps(text: str) -> list[float]:
    try:
        return [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"steps are percents like 10,50,100: {text!r}") from None


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("rollout", help="progressive rollouts")
    actions = parser.add_subparsers(dest="action", required=True)
    start = client_command(actions, "start", help="move an alias to a version step by step")
    start.add_argument("alias")
    start.add_argument("--to", required=True, help="the registry version to roll out")
    start.add_argument("--steps", type=_steps, default=[10.0, 50.0, 100.0])
    start.add_argument("--interval", type=duration_s, default=300.0, help="per step (5m)")
    start.add_argument("--min-samples", type=int, default=50)
    start.add_argument("--force", action="store_true", help="start without a passing gate")
    for name, text in (("status", "a rollout, or all"), ("pause", "stop advancing"),
                       ("resume", "advance again"), ("abort", "candidate to 0% now")):  # fmt: skip
        action = client_command(actions, name, help=text)
        action.add_argument("alias", nargs="?" if name == "status" else None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "start":
        body = {"alias": args.alias, "to": args.to, "steps": args.steps,
                "interval_s": args.interval, "min_samples": args.min_samples,
                "force": args.force}  # fmt: skip
        rows = [call(args, "POST", _BASE, body)]
    elif args.action == "status" and args.alias is None:
        rows = call(args, "GET", _BASE)["data"]
    elif args.action == "status":
        rows = [call(args, "GET", f"{_BASE}/{args.alias}")]
    elif args.action in ("pause", "resume", "abort"):
        rows = [call(args, "POST", f"{_BASE}/{args.alias}/{args.action}", {})]
    else:
        raise ConfigError(f"unknown action {args.action}")
    print(render(rows, args.output, None if args.output == "json" else _COLUMNS))
    return 0
