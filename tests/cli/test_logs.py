"""Log set-up: fleetgate's INFO lines shown, library INFO lines only when asked for."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from fleetgate.cli.logs import LIBRARY_LEVEL_ENV, parse_level

# A fresh interpreter: logging is process-wide, and pytest has already set it up here.
SCRIPT = """
import logging, sys
from fleetgate.cli.logs import configure
configure(sys.argv[1])
for name in ("fleetgate.serve", "alembic.runtime.migration", "aiohttp.access"):
    log = logging.getLogger(name)
    log.debug("debug from %s", name)
    log.info("info from %s", name)
    log.warning("warning from %s", name)
"""


def _stderr(level: str, library: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != LIBRARY_LEVEL_ENV}
    if library is not None:
        env[LIBRARY_LEVEL_ENV] = library
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, level], env=env, capture_output=True, text=True, check=True
    )
    return proc.stderr


def test_by_default_libraries_log_warnings_only() -> None:
    err = _stderr("INFO")
    assert "info from fleetgate.serve" in err
    assert "debug from fleetgate.serve" not in err
    assert "info from alembic.runtime.migration" not in err
    assert "warning from alembic.runtime.migration" in err
    assert "info from aiohttp.access" not in err


def test_debug_shows_everything() -> None:
    err = _stderr("debug")
    assert "debug from fleetgate.serve" in err
    assert "info from alembic.runtime.migration" in err
    assert "debug from aiohttp.access" in err


def test_the_environment_sets_the_libraries_level() -> None:
    err = _stderr("info", library="info")
    assert "info from alembic.runtime.migration" in err
    assert "debug from alembic.runtime.migration" not in err
    assert "info from fleetgate.serve" in err


def test_a_quieter_level_quiets_libraries_too() -> None:
    err = _stderr("error")
    assert "warning from fleetgate.serve" not in err
    assert "warning from alembic.runtime.migration" not in err


@pytest.mark.parametrize(
    ("text", "level"),
    [("debug", logging.DEBUG), ("WARNING", logging.WARNING), ("15", 15), ("nope", logging.INFO)],
)
def test_parse_level(text: str, level: int) -> None:
    assert parse_level(text) == level
