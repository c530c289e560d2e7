"""``fleetgate config check FILE``: validate a config without starting anything;
``fleetgate config reference``: render docs/config-reference.md (`fleetgate.cli.reference`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetgate.app import SECTIONS
from fleetgate.cli.reference import run_reference
from fleetgate.config.loader import load_config
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.strategies import StrategyRegistry

__all__ = ["register", "run_check"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("config", help="work with config files")
    inner = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = inner.add_parser("check", help="validate a config file")
    check.add_argument("file", type=Path)
    check.set_defaults(func=run_check)
    reference = inner.add_parser(
        "reference", help="render the configuration reference from the config models"
    )
    reference.add_argument("--output", type=Path, default=None, help="write it here")
    reference.set_defaults(func=run_reference)


def run_check(args: argparse.Namespace) -> int:
    config = load_config(args.file, sections=SECTIONS)
    # building the strategies sends nothing: the session is never opened
    strategies = StrategyRegistry.with_builtins(EngineAwareRouting.standalone(OutboundHttp()))
    for alias in config.models:
        strategies.create(alias)
    deployments = sum(len(a.deployments) for a in config.models)
    print(f"{args.file}: OK ({len(config.models)} aliases, {deployments} deployments)")
    for alias in config.models:
        tail = f" -> fallbacks {', '.join(alias.fallbacks)}" if alias.fallbacks else ""
        local = " [local-only]" if alias.local_only else ""
        print(
            f"  {alias.alias}: {alias.strategy}, {len(alias.deployments)} deployments{local}{tail}"
        )
    return 0
