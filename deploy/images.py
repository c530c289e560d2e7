#!/usr/bin/env python3
"""The base images of deploy/Dockerfile pinned by digest: deploy/images.lock.

Each line of the lock is ``BUILD_ARG IMAGE:TAG DIGEST``: the Dockerfile's ``ARG`` that names a
base image (``PYTHON_IMAGE``), the tag it defaults to, and the digest that tag resolved to when
the lock was last filled, or ``-`` when it has not been filled yet. Comments start with ``#``.

    python3 deploy/images.py fill     # `make image-digests`: resolve every tag (online)
    python3 deploy/images.py args     # the release build's --build-arg flags (`make image`)

``fill`` asks the registry through ``docker buildx imagetools inspect`` (the digest of the
tag's manifest list, so every platform's build uses the same bytes) and rewrites the lock.
``args`` prints ``--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...`` for each line,
and refuses (exit 2, naming the lines) while any digest is missing: a release is never built
from a tag that could move. Only the standard library: it runs before any install.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LOCK = Path(__file__).with_name("images.lock")
UNFILLED = "-"
_ARG = re.compile(r"^[A-Z][A-Z0-9_]*_IMAGE$")
# name[:tag], lower-case registry/path components (no digest: the digest has its own column)
_IMAGE = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEADER = """\
# Base images of deploy/Dockerfile: build arg, image:tag, digest (`-`: not filled yet).
# `make image-digests` fills the digests (docker buildx imagetools inspect, online);
# `make image` builds with IMAGE:TAG@DIGEST and refuses while a digest is missing.
"""


class LockError(ValueError):
    """The lock file is malformed, or a digest is missing where one is required."""


@dataclass(frozen=True)
class Pin:
    arg: str  # the Dockerfile's ARG, e.g. PYTHON_IMAGE
    image: str  # name:tag, e.g. python:3.11-slim-bookworm
    digest: str | None  # sha256:<64 hex>, None when not filled

    def reference(self) -> str:
        """``image@digest`` (what the release build passes); raises when not filled."""
        if self.digest is None:
            raise LockError(f"{self.arg} ({self.image}) has no digest: run `make image-digests`")
        return f"{self.image}@{self.digest}"


def parse(text: str) -> list[Pin]:
    """The pins of a lock file's text; `LockError` naming the line for anything malformed."""
    pins: list[Pin] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 3:
            raise LockError(f"line {number}: want 'BUILD_ARG IMAGE:TAG DIGEST', got {raw!r}")
        arg, image, digest = fields
        if not _ARG.match(arg):
            raise LockError(f"line {number}: {arg!r} is not a build arg named *_IMAGE")
        if not _IMAGE.match(image) or "@" in image:
            raise LockError(f"line {number}: {image!r} is not an image name with a tag")
        if digest != UNFILLED and not _DIGEST.match(digest):
            raise LockError(f"line {number}: {digest!r} is not sha256:<64 hex digits> or '-'")
        if any(p.arg == arg for p in pins):
            raise LockError(f"line {number}: {arg} is listed twice")
        pins.append(Pin(arg, image, None if digest == UNFILLED else digest))
    if not pins:
        raise LockError("no image listed")
    return pins


def render(pins: list[Pin]) -> str:
    width = max(len(p.arg) for p in pins)
    image_width = max(len(p.image) for p in pins)
    lines = [
        f"{p.arg:<{width}}  {p.image:<{image_width}}  {p.digest or UNFILLED}".rstrip() for p in pins
    ]
    return _HEADER + "\n".join(lines) + "\n"


def build_args(pins: list[Pin]) -> list[str]:
    """``--build-arg ARG=image@digest`` for every pin; `LockError` naming each unfilled one."""
    missing = [f"{p.arg} ({p.image})" for p in pins if p.digest is None]
    if missing:
        raise LockError(
            f"no digest for {', '.join(missing)} in {LOCK.name}: run `make image-digests` "
            "where the registry can be reached, and commit the lock"
        )
    out: list[str] = []
    for p in pins:
        out += ["--build-arg", f"{p.arg}={p.reference()}"]
    return out


def resolve(image: str, docker: str = "docker") -> str:
    """The digest ``image`` resolves to now (its manifest list's), from the registry."""
    done = subprocess.run(
        [docker, "buildx", "imagetools", "inspect", image, "--format", "{{json .Manifest}}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise LockError(f"{image}: docker buildx imagetools inspect failed: {done.stderr.strip()}")
    try:
        digest = json.loads(done.stdout)["digest"]
    except (ValueError, KeyError, TypeError):
        raise LockError(f"{image}: no digest in {done.stdout[:200]!r}") from None
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise LockError(f"{image}: {digest!r} is not a sha256 digest")
    return digest


def main(argv: list[str]) -> int:
    usage = "usage: images.py fill|args [LOCK]"
    if not argv or argv[0] not in ("fill", "args") or len(argv) > 2:
        print(usage, file=sys.stderr)
        return 2
    lock = Path(argv[1]) if len(argv) == 2 else LOCK
    try:
        pins = parse(lock.read_text())
        if argv[0] == "args":
            print(" ".join(build_args(pins)))
            return 0
        filled = [Pin(p.arg, p.image, resolve(p.image)) for p in pins]
    except (LockError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"images.py: {exc}", file=sys.stderr)
        return 2
    lock.write_text(render(filled))
    for p in filled:
        print(f"{p.arg} {p.image}@{p.digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
