"""services.crypto.paillier is layered (no import circle, no module imports the facade) and crypto does no file I/O."""

from __future__ import annotations

import ast

from tests.support.layout import ROOT, imported_modules, layering_violations

# each module may import only those before it
ORDER = ["fixed_point", "packing", "kernels", "matrix", "context", "sandwich", "reference"]
FILE_IO_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "fchmod", "chmod", "unlink"}


def test_paillier_modules_are_layered() -> None:
    assert layering_violations("services.crypto.paillier", ORDER) == []


def test_paillier_imports_nothing_of_ours_but_errors() -> None:
    ours = {m for name in ORDER for m in imported_modules("services.crypto.paillier", name)
            if m.split(".")[0] in {"services", "models", "party_api", "coordinator_api", "cli"}}
    assert {m for m in ours if not m.startswith("services.crypto.paillier")} == {"services.errors"}


def test_crypto_does_no_file_io() -> None:
    for path in sorted((ROOT / "services" / "crypto").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not {"pathlib", "shutil", "tempfile", "io"} & set(names), path
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                assert name not in FILE_IO_CALLS, f"{path.name}:{node.lineno} calls {name}"
