"""How many allocations CPython makes, and how many bytes they ask for (``alloc_counter.c``).

The C file is compiled once into a temporary directory with the system C compiler and loaded
with :class:`ctypes.PyDLL`; :func:`load` returns None (and the caller prints n/a) when there is
no compiler or no Python headers.

    counter = load()
    before = counter.read()
    ...
    allocs, nbytes = counter.read() - before
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "alloc_counter.c"


@dataclass(frozen=True)
class Counts:
    """Allocation calls and requested bytes since the counter was installed."""

    allocs: int
    nbytes: int

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.allocs - other.allocs, self.nbytes - other.nbytes)


class AllocCounter:
    """The loaded library, installed into this interpreter's allocators."""

    def __init__(self, lib: ctypes.PyDLL) -> None:
        self._lib = lib
        lib.fg_install()

    def read(self) -> Counts:
        allocs, nbytes = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        self._lib.fg_counts(ctypes.byref(allocs), ctypes.byref(nbytes))
        return Counts(allocs.value, nbytes.value)


def _build() -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths().get("include")
    if cc is None or include is None or not (Path(include) / "Python.h").exists():
        return None
    tag = hashlib.sha256(SOURCE.read_bytes() + include.encode()).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"fleetgate-alloc-counter-{tag}.so"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp.so")
    argv = [cc, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", str(tmp)]
    if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
        return None
    tmp.replace(out)
    return out


def load() -> AllocCounter | None:
    """The counter installed into this process, or None where it cannot be built."""
    path = _build()
    return None if path is None else AllocCounter(ctypes.PyDLL(str(path)))
