"""What ships: the runtime wheel holds the fitted artefacts it loads and no training code or
training data; the tooling distribution (``training/``) holds those."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml

from fleetgate.cli.processes import stop, wait_http
from fleetgate.console.feature import NPM_SOURCES, VENDOR
from tests.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns(
    "__pycache__", "node_modules", "vendor", "*.egg-info", "build", "dist"
)  # what a clean clone lacks: the image's build context holds none of these
CONSOLE = ROOT / "src" / "fleetgate" / "console"
# deploy/Dockerfile: `COPY --from=console /console/node_modules/<file> ./<destination>`
IMAGE_COPY = re.compile(r"^COPY --from=console /console/node_modules/(\S+) \./(\S+)$", re.M)

# loaded at serve time: the classifier check's head and features, the words check's lists,
# the normaliser's Traditional -> Simplified table
RUNTIME = {
    "fleetgate/py.typed",
    "fleetgate/safety/data/classifier_head.npz",
    "fleetgate/safety/data/wordlists.json",
    "fleetgate/safety/data/t2s.json",  # Traditional -> Simplified before the input checks
    "fleetgate/safety/checks/classifier.py",
    "fleetgate/safety/classifier/features.py",
    "fleetgate/safety/classifier/model.py",
    "fleetgate/safety/classifier/trainer.py",
    "fleetgate/cli/safety.py",
}
# training code, the training corpus and examples, the evaluation harness and its prompt sets
FORBIDDEN = {
    "fleetgate/safety/evaluate.py",
    "fleetgate/safety/classifier/train.py",
    "fleetgate/safety/classifier/corpus.py",
    "fleetgate/safety/classifier/fit_hidden.py",
    "fleetgate/safety/data/classifier_train.jsonl",
    "fleetgate/safety/data/corpus/en.json",
    "fleetgate/safety/data/corpus/zh.json",
    "fleetgate/safety/data/redteam.jsonl",
    "fleetgate/safety/data/benign.jsonl",
}
TOOLING = {
    "fleetgate_training/classifier/train.py",
    "fleetgate_training/classifier/corpus.py",
    "fleetgate_training/classifier/fit_hidden.py",
    "fleetgate_training/classifier/fit_softmax.py",
    "fleetgate_training/safety/evaluate.py",
    "fleetgate_training/safety/compare.py",
    "fleetgate_training/safety/cli.py",
    "fleetgate_training/data/classifier_train.jsonl",
    "fleetgate_training/data/corpus/en.json",
    "fleetgate_training/data/corpus/zh.json",
    "fleetgate_training/data/redteam.jsonl",
    "fleetgate_training/data/benign.jsonl",
}


def _wheel(project: Path, tmp_path: Path, *, image: bool = False) -> set[str]:
    """The file names in the wheel ``pip wheel --no-deps`` builds from a copy of ``project``
    (a copy: setuptools writes build/ and egg-info next to the sources). ``image``: staged as
    deploy/Dockerfile stages it (the console stage's npm files copied into the sources)."""
    copy = tmp_path / "project"
    shutil.copytree(project / "src", copy / "src", ignore=IGNORED)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(project / name, copy / name)
    if image:
        for source, destination in IMAGE_COPY.findall((ROOT / "deploy/Dockerfile").read_text()):
            (copy / destination).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(CONSOLE / "node_modules" / source, copy / destination)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         str(copy), "-w", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        if image:
            z.extractall(tmp_path / "site")
        return set(z.namelist())


@pytest.mark.slow
def test_the_runtime_wheel_ships_the_fitted_artefacts_and_no_training(tmp_path: Path) -> None:
    names = _wheel(ROOT, tmp_path)
    assert RUNTIME <= names, RUNTIME - names
    assert not FORBIDDEN & names, FORBIDDEN & names
    assert not [n for n in names if n.startswith("fleetgate_training/")]
    data = {n for n in names if n.startswith("fleetgate/safety/data/")}
    assert data == {"fleetgate/safety/data/classifier_head.npz",
                    "fleetgate/safety/data/wordlists.json",
                    "fleetgate/safety/data/t2s.json"}  # fmt: skip


@pytest.mark.slow
def test_the_tooling_wheel_holds_the_training_code_and_data(tmp_path: Path) -> None:
    names = _wheel(ROOT / "training", tmp_path)
    assert TOOLING <= names, TOOLING - names
    assert not [n for n in names if n.startswith("fleetgate/")]


def test_the_runtime_imports_no_tooling_module() -> None:
    """The runtime finds the tooling through entry points only (``fleetgate.cli``,
    ``fleetgate.classifier_trainers``), never by importing it: read from the source."""
    found = []
    for path in sorted((ROOT / "src" / "fleetgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names
                      if n.partition(".")[0] == "fleetgate_training"]  # fmt: skip
    assert not found


def test_the_image_copies_every_file_the_console_serves_from_npm() -> None:
    """Each VENDOR file has its COPY line in the image's builder stage, from where npm puts it."""
    copies = dict(IMAGE_COPY.findall((ROOT / "deploy/Dockerfile").read_text()))
    wanted = {str(NPM_SOURCES[name]): str(path.relative_to(ROOT)) for name, path in VENDOR.items()}
    assert copies == wanted


@pytest.mark.slow
def test_the_image_wheel_serves_every_console_asset(tmp_path: Path) -> None:
    """A wheel built as deploy/Dockerfile builds it, installed on its own (not the editable
    checkout), serves the console's pages' static files and npm files."""
    if not (CONSOLE / "node_modules").is_dir():
        pytest.skip("the console's npm packages are not installed (make, or npm ci)")
    names = _wheel(ROOT, tmp_path, image=True)
    package = CONSOLE.relative_to(ROOT / "src")
    assets = [p.relative_to(CONSOLE) for p in (CONSOLE / "static").rglob("*") if p.is_file()]
    assets += [p.relative_to(CONSOLE) for p in (CONSOLE / "templates").glob("*.html")]
    assert {f"{package}/{a}" for a in assets} <= names
    assert {f"{package}/{p.relative_to(CONSOLE)}" for p in VENDOR.values()} <= names
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": [{"alias": "a", "deployments": [
        {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]}]}))  # fmt: skip
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "FLEETGATE_MASTER_KEY": "sk-m"}
    code = (
        "import sys, fleetgate; print(fleetgate.__file__, flush=True)\n"
        "from fleetgate.cli.main import main; sys.exit(main())"
    )
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--config", str(config), "--port", str(port),
         "--data-dir", str(tmp_path / "data"), "--no-watch"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/health/live", proc, timeout=60)
        served = {f"/ui/vendor/{name}" for name in VENDOR}
        served |= {
            f"/ui/static/{a.relative_to('static')}" for a in assets if a.parts[0] == "static"
        }
        for path in sorted(served):
            with urllib.request.urlopen(base + path, timeout=5) as resp:
                assert resp.status == 200 and resp.read(), path
    finally:
        stop(proc)
        log.close()
    first = (tmp_path / "serve.log").read_text().splitlines()[0]
    assert first.startswith(str(tmp_path / "site")), first  # the wheel's copy served, not src/
