"""The release image's base images by digest (#35): deploy/images.lock lists every base image
of deploy/Dockerfile (build arg, tag, digest), `make image` — the release build docs/operations.md
documents — passes each as IMAGE:TAG@DIGEST and refuses while a digest is missing, and
`make image-digests` fills the lock from ``docker buildx imagetools inspect``. Docker itself is a
stand-in here (a script on PATH that records its arguments): no registry can be reached."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "images.lock"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def _images() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_images", ROOT / "deploy" / "images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


images = _images()


def _digest(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _filled(tmp_path: Path) -> Path:
    pins = [images.Pin(p.arg, p.image, _digest(p.image)) for p in images.parse(LOCK.read_text())]
    lock = tmp_path / "images.lock"
    lock.write_text(images.render(pins))
    return lock


def _fake_docker(tmp_path: Path, fail: bool = False) -> tuple[Path, Path]:
    """A ``docker`` that appends its argv (JSON) to a log; ``buildx imagetools inspect IMAGE``
    answers a manifest descriptor whose digest is the sha256 of the image name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    script = bin_dir / "docker"
    script.write_text(
        f"#!{sys.executable}\n"
        "import hashlib, json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if {fail!r}:\n"
        "    sys.stderr.write('ERROR: failed to do request: dial tcp: no route to host')\n"
        "    sys.exit(1)\n"
        "if sys.argv[1:4] == ['buildx', 'imagetools', 'inspect']:\n"
        "    digest = 'sha256:' + hashlib.sha256(sys.argv[4].encode()).hexdigest()\n"
        "    print(json.dumps({'mediaType': 'application/vnd.oci.image.index.v1+json',\n"
        "                      'digest': digest, 'size': 1234}))\n"
    )
    script.chmod(0o755)
    return bin_dir, log


def _make(target: str, bin_dir: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    args = [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), target, f"PYTHON={sys.executable}", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def _calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_lock_lists_every_base_image_of_the_dockerfile() -> None:
    pins = images.parse(LOCK.read_text())
    assert LOCK.read_text() == images.render(pins)  # the form `make image-digests` writes
    text = DOCKERFILE.read_text()
    defaults = dict(re.findall(r"^ARG ([A-Z0-9_]+_IMAGE)=(\S+)$", text, re.M))
    assert {p.arg: p.image for p in pins} == defaults
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.M))
    for source in re.findall(r"^FROM (\S+)", text, re.M):
        arg = re.fullmatch(r"\$\{([A-Z0-9_]+)\}", source)
        assert (arg is not None and arg.group(1) in defaults) or source in stages, source
    # the Dockerfile points at the lock and the release build (what a reader finds first)
    assert "deploy/images.lock" in text and "make image" in text


def test_the_release_build_passes_every_base_image_by_digest(tmp_path: Path) -> None:
    bin_dir, log = _fake_docker(tmp_path)
    lock = _filled(tmp_path)
    done = _make("image", bin_dir, IMAGES_LOCK=str(lock), IMAGE="fleetgate:9.9.9", EXTRAS="ml")
    assert done.returncode == 0, done.stderr
    (call,) = _calls(log)
    assert call[:3] == ["build", "-f", "deploy/Dockerfile"]
    passed = dict(
        call[i + 1].split("=", 1) for i, a in enumerate(call) if a == "--build-arg"
    )  # fmt: skip
    for pin in images.parse(lock.read_text()):
        assert passed[pin.arg] == f"{pin.image}@{_digest(pin.image)}"
    assert passed["EXTRAS"] == "ml"
    assert call[-3:] == ["-t", "fleetgate:9.9.9", "."]


def test_the_release_build_refuses_a_lock_without_digests(tmp_path: Path) -> None:
    bin_dir, log = _fake_docker(tmp_path)
    lock = tmp_path / "images.lock"
    pins = images.parse(LOCK.read_text())
    half = [pins[0], *(images.Pin(p.arg, p.image, _digest(p.image)) for p in pins[1:])]
    lock.write_text(images.render([images.Pin(half[0].arg, half[0].image, None), *half[1:]]))
    done = _make("image", bin_dir, IMAGES_LOCK=str(lock))
    assert done.returncode != 0
    assert f"no digest for {pins[0].arg} ({pins[0].image})" in done.stderr
    assert "make image-digests" in done.stderr
    assert _calls(log) == []  # docker build never ran on a tag


def test_image_digests_fills_the_lock_from_the_registry(tmp_path: Path) -> None:
    bin_dir, log = _fake_docker(tmp_path)
    lock = tmp_path / "images.lock"
    shutil.copy(LOCK, lock)
    done = _make("image-digests", bin_dir, IMAGES_LOCK=str(lock))
    assert done.returncode == 0, done.stderr
    pins = images.parse(lock.read_text())
    assert all(p.digest == _digest(p.image) for p in pins)
    for pin, call in zip(pins, _calls(log), strict=True):
        assert call == ["buildx", "imagetools", "inspect", pin.image, "--format",
                        "{{json .Manifest}}"]  # fmt: skip
    # then the release build goes through with those digests
    assert _make("image", bin_dir, IMAGES_LOCK=str(lock)).returncode == 0


def test_a_failed_lookup_leaves_the_lock_as_it_was(tmp_path: Path) -> None:
    bin_dir, _ = _fake_docker(tmp_path, fail=True)
    lock = tmp_path / "images.lock"
    shutil.copy(LOCK, lock)
    done = _make("image-digests", bin_dir, IMAGES_LOCK=str(lock))
    assert done.returncode != 0 and "no route to host" in done.stderr
    assert lock.read_text() == LOCK.read_text()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("PYTHON_IMAGE python:3.11 sha256:abc", "not sha256:<64 hex digits>"),
        ("PYTHON_IMAGE python:3.11", "want 'BUILD_ARG IMAGE:TAG DIGEST'"),
        ("python_image python:3.11 -", "not a build arg"),
        (f"PYTHON_IMAGE python:3.11@{_digest('x')} -", "not an image name"),
        ("PYTHON_IMAGE Python:3.11 -", "not an image name"),
        ("PYTHON_IMAGE python:3.11 -\nPYTHON_IMAGE python:3.12 -", "listed twice"),
        ("# only a comment", "no image listed"),
    ],
)
def test_a_malformed_lock_is_refused_naming_the_problem(line: str, why: str) -> None:
    with pytest.raises(images.LockError, match=re.escape(why)):
        images.parse(line)


def test_the_docs_document_the_pinned_release_build() -> None:
    ops = (ROOT / "docs" / "operations.md").read_text()
    section = ops.split("## Container image", 1)[1].split("\n## ", 1)[0]
    assert "make image IMAGE=" in section and "deploy/images.lock" in section
    assert "make image-digests" in section
    assert "docker build -f deploy/Dockerfile -t" not in section  # no tag-only release build


def test_the_shipped_lock_pins_every_base_image() -> None:
    """A release can be built from this checkout: no line of the lock is unfilled."""
    pins = images.parse(LOCK.read_text())
    assert all(p.digest is not None for p in pins), [p.arg for p in pins if p.digest is None]
    assert len(images.build_args(pins)) == 2 * len(pins)


def test_every_stage_checks_its_base_is_the_tags() -> None:
    """A digest names bytes, not a tag: each stage built on a locked base checks, in its first
    step, the Debian release and the runtime version its tag promises, so a digest that belongs
    to another tag fails the build instead of changing what ships."""
    text = DOCKERFILE.read_text()
    tags = dict(re.findall(r"^ARG ([A-Z0-9_]+_IMAGE)=(\S+)$", text, re.M))
    checked = {"PYTHON_IMAGE": "sys.version_info[:2] != (3, 11)", "NODE_IMAGE": "'^v22\\.'"}
    assert tags == {
        "PYTHON_IMAGE": "python:3.11-slim-bookworm",
        "NODE_IMAGE": "node:22-bookworm-slim",
    }
    for stage in re.split(r"^(?=FROM )", text, flags=re.M)[1:]:
        arg = re.match(r"FROM \$\{([A-Z0-9_]+)\} AS (\S+)", stage)
        if arg is None or arg.group(2) == "runtime":  # runtime: the builder's base, checked there
            continue
        first_run = stage.split("\nRUN ", 1)[1].split("\nWORKDIR", 1)[0].split("\nARG", 1)[0]
        assert "grep -q '^12\\.' /etc/debian_version" in first_run, arg.group(2)
        assert checked[arg.group(1)] in first_run, arg.group(2)
