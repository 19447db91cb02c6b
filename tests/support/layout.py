"""Where the repository and the shared data are, and the static import graph of our modules (ast) for layering tests."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The shared data sets live next to the repository (../shared/data); FEDREC_DATA_DIR overrides.
DATA = Path(os.environ.get("FEDREC_DATA_DIR", ROOT.parent / "shared" / "data"))


def imported_modules(package: str, module: str) -> set[str]:
    """Dotted names of everything `package.module` imports ("from p import m" counts as p.m when m is a module)."""
    tree = ast.parse((ROOT / package.replace(".", "/") / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = ROOT / node.module.replace(".", "/")
            for a in node.names:
                is_module = (base / f"{a.name}.py").exists() or (base / a.name / "__init__.py").exists()
                out.add(f"{node.module}.{a.name}" if is_module else node.module)
    return out


def sibling_imports(package: str, module: str) -> set[str]:
    """The modules of `package` that `package.module` imports (the package itself counts as its facade)."""
    prefix = package + "."
    return {m[len(prefix):].split(".")[0] if m.startswith(prefix) else "__init__"
            for m in imported_modules(package, module) if m == package or m.startswith(prefix)}


def layering_violations(package: str, order: list[str]) -> list[str]:
    """Imports of a module listed later (or of the facade) by each module of `order`; [] when layered."""
    found = sorted(p.stem for p in (ROOT / package.replace(".", "/")).glob("*.py") if p.stem != "__init__")
    bad = [f"modules {found} != listed {sorted(order)}"] if found != sorted(order) else []
    for i, module in enumerate(order):
        bad += [f"{module} imports {dep}" for dep in sorted(sibling_imports(package, module) - set(order[:i]))]
    return bad
