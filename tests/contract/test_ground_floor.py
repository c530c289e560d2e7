"""The request contract is the ground floor: it imports nothing of fleetgate above it."""

from __future__ import annotations

import ast
from pathlib import Path

CONTRACT = Path(__file__).resolve().parents[2] / "src" / "fleetgate" / "contract"
ALLOWED = ("fleetgate.errors", "fleetgate.contract")


def _fleetgate_imports(path: Path) -> set[str]:
    """Every fleetgate module ``path`` imports, at any depth (deferred imports too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("fleetgate"))
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            module = node.module or ""
            if module == "fleetgate":
                out.update(f"fleetgate.{a.name}" for a in node.names)
            elif module.startswith("fleetgate."):
                out.add(module)
    return out


def test_the_contract_imports_only_itself_and_the_error_tree() -> None:
    modules = sorted(CONTRACT.glob("*.py"))
    assert len(modules) > 1
    above = {
        f"{path.name} -> {imported}"
        for path in modules
        for imported in _fleetgate_imports(path)
        if not any(imported == a or imported.startswith(f"{a}.") for a in ALLOWED)
    }
    assert not above, sorted(above)
