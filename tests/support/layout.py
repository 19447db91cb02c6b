"""Where the repository and the shared data are, and the static import graph of our modules (ast) for layering tests."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The shared data sets live next to the repository (../shared/data); FEDREC_DATA_DIR overrides.
DATA = Path(os.environ.get("FEDREC_DATA_DIR", ROOT.parent / "shared" / "data"))


# Top-level folders of our own code (tests and benchmarks may import anything and are not checked).
OURS = ("services", "models", "api_common", "party_api", "coordinator_api", "cli", "migrations")


def module_name(path: Path) -> str:
    """Dotted module name of a file under ROOT (a package's __init__ is the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The architecture table's unit of a module: services.<name> inside services, else its top-level package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def our_files() -> list[Path]:
    """Every Python file of our own code."""
    return sorted(f for top in OURS for f in (ROOT / top).rglob("*.py"))


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in a file, nested ones included ("from p import m" is p.m when m is a module)."""
    out: list[tuple[int, str]] = []
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module or ""
            folder = ROOT / base.replace(".", "/")
            for a in node.names:
                is_module = (folder / f"{a.name}.py").exists() or (folder / a.name / "__init__.py").exists()
                out.append((node.lineno, f"{base}.{a.name}" if is_module else base))
    return out


def imported_modules(package: str, module: str) -> set[str]:
    """Dotted names of everything `package.module` imports ("from p import m" counts as p.m when m is a module)."""
    return {name for _, name in imports_of(ROOT / package.replace(".", "/") / f"{module}.py")}


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
