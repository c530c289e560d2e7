"""What ships: the runtime wheel holds the fitted artefacts it loads and no training code or
training data; the tooling distribution (``training/``) holds those."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns("__pycache__", "node_modules", "*.egg-info", "build", "dist")

# loaded at serve time: the classifier check's head and features, the words check's lists
RUNTIME = {
    "fleetgate/py.typed",
    "fleetgate/safety/data/classifier_head.npz",
    "fleetgate/safety/data/wordlists.json",
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


def _wheel(project: Path, tmp_path: Path) -> set[str]:
    """The file names in the wheel ``pip wheel --no-deps`` builds from a copy of ``project``
    (a copy: setuptools writes build/ and egg-info next to the sources)."""
    copy = tmp_path / "project"
    shutil.copytree(project / "src", copy / "src", ignore=IGNORED)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(project / name, copy / name)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         str(copy), "-w", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


@pytest.mark.slow
def test_the_runtime_wheel_ships_the_fitted_artefacts_and_no_training(tmp_path: Path) -> None:
    names = _wheel(ROOT, tmp_path)
    assert RUNTIME <= names, RUNTIME - names
    assert not FORBIDDEN & names, FORBIDDEN & names
    assert not [n for n in names if n.startswith("fleetgate_training/")]
    data = {n for n in names if n.startswith("fleetgate/safety/data/")}
    assert data == {"fleetgate/safety/data/classifier_head.npz",
                    "fleetgate/safety/data/wordlists.json"}  # fmt: skip


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
