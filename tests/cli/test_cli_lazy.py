"""A sub-command imports its own module only: ``fleetgate sim`` (every engine a release
pipeline starts locally) does not pay for importing the gateway and all its features."""

from __future__ import annotations

import subprocess
import sys

from fleetgate.cli.main import SUBCOMMANDS, _command, build_parser

PROBE = """
import sys
from fleetgate.cli.main import build_parser
args = build_parser("sim").parse_args(["sim", "--mode", "echo", "--port", "1"])
assert args.func is not None
print(sorted(m for m in sys.modules
             if m.startswith("fleetgate.cli.") and m != "fleetgate.cli.main"))
print("fleetgate.app" in sys.modules)
"""


def test_the_command_named_is_found_past_global_options() -> None:
    assert _command(["sim", "--port", "1"]) == "sim"
    assert _command(["--log-level", "DEBUG", "sim", "--port", "1"]) == "sim"
    assert _command(["--log-level=DEBUG", "eval", "run"]) == "eval"
    assert _command(["-h"]) is None and _command([]) is None
    assert _command(["no-such-command"]) is None  # the whole parser reports it


def test_one_command_builds_only_its_parser_and_the_whole_one_lists_all() -> None:
    one = build_parser("sim").format_help()
    assert "sim" in one and "serve" not in one.split("COMMAND", 1)[1].split("options")[0]
    whole = build_parser().format_help()
    for name in ("serve", "sim", "eval", "pipeline"):
        assert name in whole and name in SUBCOMMANDS


def test_sim_does_not_import_the_gateway() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()  # fmt: skip
    assert out[0] == "['fleetgate.cli.logs', 'fleetgate.cli.parsers', 'fleetgate.cli.sim']", out
    assert out[1] == "False", out
