"""deploy/Dockerfile has the shape the operations docs promise (checked without docker)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.deploy.dockerfile_lint import problems, stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()


def test_dockerfile_passes_the_lint() -> None:
    assert problems(DOCKERFILE) == []


def test_builder_has_the_compilers_and_the_runtime_gets_only_the_venv() -> None:
    _, (console, builder, runtime) = stages(DOCKERFILE)
    # the console's npm files at the lock file's versions, without the test-only packages
    assert any("npm ci --omit=dev" in run for run in console.args("RUN"))
    assert any("package-lock.json" in copy for copy in console.args("COPY"))
    assert any("build-essential" in run for run in builder.args("RUN"))
    copies = runtime.args("COPY")
    assert copies == ["--from=builder /opt/fleetgate /opt/fleetgate"]
    assert builder.base == runtime.base  # same Python ABI in both stages


def test_ports_agree() -> None:
    _, found = stages(DOCKERFILE)
    final = found[-1]
    (port,) = final.args("EXPOSE")
    assert f"127.0.0.1:{port}/health/live" in final.args("HEALTHCHECK")[0]
    assert f'"--port", "{port}"' in final.args("CMD")[0]


def test_extras_named_in_the_docs_exist() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "ml" in extras and any("torch" in dep for dep in extras["ml"])
    assert re.search(r"EXTRAS=ml", DOCKERFILE)


def test_the_lint_catches_a_bad_image() -> None:
    bad = DOCKERFILE.replace("USER 10001:10001", "USER root").replace(
        "ARG EXTRAS=", "ARG EXTRAS=ml"
    )
    bad = bad.replace("STOPSIGNAL SIGTERM", "")
    bad += "\nRUN apt-get update && apt-get install -y gcc\n"
    found = problems(bad)
    assert "the final stage must end with a non-root USER" in found
    assert "the final stage installs or runs a build tool: gcc" in found
    assert "the final stage has no STOPSIGNAL" in found
    assert any(p.startswith("ARG EXTRAS") for p in found)
    single = "FROM python:3.11-slim\nUSER 1000\n"
    assert problems(single) == ["needs a builder stage and a runtime stage (multi-stage)"]


def _requirement_names(dist: str, seen: dict[str, str]) -> None:
    """``dist``'s requirements without extras, transitively: name (normalised) -> version."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    for line in metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name not in seen:
            seen[str(name)] = metadata.version(req.name)
            _requirement_names(req.name, seen)


def test_the_image_installs_locked_versions_of_every_runtime_dependency() -> None:
    """deploy/constraints.txt pins each runtime dependency (none of the extras) at the version
    this checkout's venv resolved, and the image's pip install uses it."""
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[str(canonicalize_name(name))] = version
    wanted: dict[str, str] = {}
    _requirement_names("fleetgate", wanted)
    assert wanted and set(wanted) <= set(pins), set(wanted) - set(pins)
    assert {n: pins[n] for n in wanted} == wanted  # stale lock: regenerate (see its header)
    assert DOCKERFILE.count("pip install -c constraints.txt") == 2
