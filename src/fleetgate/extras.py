"""Optional dependencies: import one, or say which ``pip install`` extra brings it.

The gateway's core install is lean; plotting (``matplotlib``, extra ``bench``) and audio
resampling (``scipy``, extra ``audio``) are imported only where they are used, through
:func:`require`, so a missing package is one clear :class:`~fleetgate.errors.MissingExtra`
instead of an ``ImportError`` deep in a request or after a long benchmark run.

Example::

    signal = require("scipy.signal", extra="audio", purpose="resampling audio")
    out = signal.resample_poly(samples, 1, 3)
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fleetgate.errors import MissingExtra

__all__ = ["pyplot", "require"]


def require(module: str, *, extra: str, purpose: str) -> ModuleType:
    """``module`` imported; :class:`MissingExtra` naming ``fleetgate[extra]`` if it cannot be."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        raise MissingExtra(
            f"{purpose} needs {top}, which is not installed: pip install 'fleetgate[{extra}]'",
            extra=extra,
        ) from exc


def pyplot(purpose: str) -> ModuleType:
    """``matplotlib.pyplot`` on the file-only Agg backend (extra ``bench``)."""
    matplotlib = require("matplotlib", extra="bench", purpose=purpose)
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
