"""Import direction points inward: the core never imports the web framework or the API packages."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECKS = {
    "models": {"fastapi", "starlette", "sqlalchemy", "services", "api_common", "party_api", "coordinator_api",
               "httpx"},
    "services.crypto": {"fastapi", "starlette", "torch", "sqlalchemy", "api_common", "party_api", "coordinator_api"},
    "services.protocol": {"fastapi", "starlette", "sqlalchemy", "api_common", "party_api", "coordinator_api"},
    "services": {"fastapi", "starlette", "api_common", "party_api", "coordinator_api"},
    # The APIs' shared dialect serves both, so it may import neither.
    "api_common": {"party_api", "coordinator_api"},
    "party_api.main": {"coordinator_api"},
    "coordinator_api.main": {"party_api"},
}


def _loaded_after_import(module: str) -> set[str]:
    """Top-level package names in sys.modules after importing `module` in a fresh interpreter."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"root = importlib.import_module({module!r})\n"
        "if hasattr(root, '__path__'):\n"
        "    for info in pkgutil.walk_packages(root.__path__, root.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", sorted(CHECKS))
def test_import_direction(module: str) -> None:
    """Importing every submodule of a layer loads none of the packages it must not depend on."""
    forbidden = CHECKS[module] - {module.split(".")[0]}
    assert not (_loaded_after_import(module) & forbidden)
