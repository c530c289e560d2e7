"""Log set-up for the command line: fleetgate's own lines at ``--log-level``, libraries quiet.

Libraries (Alembic prints seven lines of plugin set-up and one per migration at every start,
asyncio, aiohttp, SQLAlchemy) log at WARNING and above unless asked for: ``--log-level debug``
shows everything, and ``FLEETGATE_LIBRARY_LOG_LEVEL=info`` (or any level) sets theirs alone.

Example::

    configure("info")   # fleetgate INFO and up; Alembic's INFO lines hidden
"""

from __future__ import annotations

import logging
import os

__all__ = ["FORMAT", "LIBRARY_LEVEL_ENV", "configure", "parse_level"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LIBRARY_LEVEL_ENV = "FLEETGATE_LIBRARY_LOG_LEVEL"


def parse_level(name: str | None, default: int = logging.INFO) -> int:
    """``"debug"``/``"INFO"``/``"20"`` as a logging level; ``default`` for anything else."""
    if not name:
        return default
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    level = logging.getLevelName(text)
    return level if isinstance(level, int) else default


def configure(level_name: str | None) -> None:
    """fleetgate's loggers at ``level_name``; everything else at WARNING (or DEBUG, or the level
    in ``FLEETGATE_LIBRARY_LOG_LEVEL``). Does nothing when logging is already set up (a test
    runner or an application embedding fleetgate owns it then)."""
    root = logging.getLogger()
    if root.handlers:
        return
    level = parse_level(level_name)
    quiet = level if level <= logging.DEBUG else max(level, logging.WARNING)
    library = parse_level(os.environ.get(LIBRARY_LEVEL_ENV), quiet)
    logging.basicConfig(level=library, format=FORMAT)
    logging.getLogger("fleetgate").setLevel(level)
