"""Which of our packages may import which: one table (drawn in docs/architecture.md), checked two ways.

Statically, every import statement of every file (nested and TYPE_CHECKING ones too) is held against
the table, so a failure names the file and the line. Dynamically, each package is imported with all
its submodules in a fresh interpreter and sys.modules is inspected, which also catches what a
third-party import drags in. A package that is new must get a row here and in the document.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import pytest

from services.federation import registry
from tests.support.layout import OURS, ROOT, imports_of, module_name, our_files, package_of

CORE = frozenset({"services.errors", "services.protocol", "services.crypto", "services.data", "services.db",
                  "models", "services.federation"})
PROTOCOLS = frozenset({"services.verfedgnn", "services.p4gcn", "services.fedpergnn"})
ROLES = frozenset({"services.party", "services.coordinator"})
APIS = frozenset({"party_api", "coordinator_api"})
SETTINGS = frozenset({"services.config"})

# package -> the packages of ours it may import (its own modules always). Arrows point inward only.
ALLOWED: dict[str, frozenset[str]] = {
    # shared core: leaves, then what needs only the error types
    "services": frozenset(),  # the namespace package: an empty __init__
    "services.errors": frozenset(),
    "services.config": frozenset(),
    "services.db": frozenset(),
    "models": frozenset(),
    "services.crypto": frozenset({"services.errors"}),
    "services.protocol": frozenset({"services.errors"}),
    "services.data": frozenset({"services.errors"}),
    # the protocol-neutral runtime: fan-out, links, aggregation strategies, the protocol registry
    "services.federation": frozenset({"services.errors", "services.crypto", "services.protocol"}),
    # protocols: the core (never a role, an API or settings; one may build on another, never in a circle)
    "services.verfedgnn": CORE,
    "services.p4gcn": CORE,
    "services.fedpergnn": CORE | {"services.verfedgnn"},  # the baseline reuses VerFedGNN's trainers
    # roles: core, settings (never each other, never a protocol: they reach protocols through the registry)
    "services.party": CORE | SETTINGS,
    "services.coordinator": CORE | SETTINGS,
    # experiments run the protocols in one process (no role, no API)
    "services.evaluation": CORE | PROTOCOLS,
    # attacks read recorded messages of experiment runs (no role, no API; nothing of ours imports them)
    "services.attacks": CORE | PROTOCOLS | {"services.evaluation"},
    # a run's privacy report: its mechanisms and the shipped attack figures (read by the coordinator's API)
    "services.privacy": CORE | {"services.verfedgnn"},
    # what both APIs share: framework glue over the core and settings (never a role, a protocol or an API)
    "api_common": CORE | SETTINGS,
    # an API: its own role, core, settings, api_common (never the other API or role, never a protocol)
    "party_api": CORE | SETTINGS | {"services.party", "api_common"},
    "coordinator_api": CORE | SETTINGS | {"services.coordinator", "services.privacy", "api_common"},
    # the command line drives everything
    "cli": CORE | PROTOCOLS | ROLES | SETTINGS | APIS | {"services.evaluation", "api_common"},
    "migrations": frozenset({"services.db"}),
}

# third-party packages the pure layers may import (the standard library always)
THIRD_PARTY: dict[str, frozenset[str]] = {
    "services.errors": frozenset(),
    "services.config": frozenset({"pydantic", "pydantic_settings"}),
    "services.db": frozenset({"sqlalchemy", "alembic"}),
    "models": frozenset({"torch", "numpy", "pydantic"}),
    "services.crypto": frozenset({"numpy", "scipy", "phe", "gmpy2", "nacl", "dp_accounting", "Crypto"}),
    "services.protocol": frozenset({"numpy", "pydantic"}),
    "services.data": frozenset({"numpy"}),
}
WEB = frozenset({"fastapi", "starlette", "uvicorn"})  # only the API packages and the CLI serve HTTP

# what a package must not load at run time, whoever imports it (third-party packages drag in others)
NOT_LOADED: dict[str, frozenset[str]] = {
    "models": WEB | {"sqlalchemy", "httpx", "phe"},
    "services.crypto": WEB | {"torch", "sqlalchemy", "httpx"},
    "services.protocol": WEB | {"torch", "sqlalchemy", "httpx"},
    "services.verfedgnn": WEB | {"sqlalchemy", "httpx"},  # the engine: storage and transport are the roles'
    "services.fedpergnn": WEB | {"sqlalchemy", "httpx"},
    "services.federation": WEB | {"torch", "sqlalchemy", "httpx"},  # the runtime: transport-free, model-free
    "services": WEB,
}


def _closure(package: str) -> set[str]:
    """Packages `package` may reach through allowed arrows (itself included)."""
    seen, todo = {package}, [package]
    while todo:
        for dep in ALLOWED[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def _found_packages() -> set[str]:
    return {package_of(module_name(f)) for f in our_files()}


def test_every_package_has_a_row() -> None:
    assert _found_packages() == set(ALLOWED), "add the package's row here and its arrows to docs/architecture.md"


def test_the_table_states_the_layering() -> None:
    """The rules the table encodes, so that loosening a row fails here rather than passing silently."""
    ours = set(ALLOWED)
    for proto in PROTOCOLS:
        assert not ALLOWED[proto] & (ROLES | APIS | SETTINGS | {"api_common", "cli"}), proto
    for role in ROLES:
        assert not ALLOWED[role] & (ROLES | APIS | {"api_common", "cli"}), role
    for package in ROLES | APIS:  # protocols plug in through the registry, never by an import
        assert not ALLOWED[package] & PROTOCOLS, package
    for api, other in (("party_api", "coordinator_api"), ("coordinator_api", "party_api")):
        assert other not in ALLOWED[api] and other not in ALLOWED["api_common"]
    assert "services.coordinator" not in ALLOWED["party_api"] and "services.party" not in ALLOWED["coordinator_api"]
    assert ALLOWED["services.crypto"] == {"services.errors"} and not ALLOWED["models"]
    assert not ALLOWED["services.evaluation"] & (ROLES | APIS)
    for analysis in ("services.attacks", "services.privacy"):
        assert not ALLOWED[analysis] & (ROLES | APIS | SETTINGS | {"api_common"}), analysis
    assert all("services.attacks" not in deps for deps in ALLOWED.values())  # the suite is a leaf of the tree
    assert all("cli" not in deps for deps in ALLOWED.values())  # nothing imports the command line
    for core in CORE:
        assert _closure(core) <= CORE | {core}, core  # the core never reaches up
    assert not ALLOWED["api_common"] & (ROLES | PROTOCOLS)
    assert all(deps <= ours for deps in ALLOWED.values())
    for package, deps in ALLOWED.items():  # no circle: what a package may import never leads back to it
        assert not any(package in _closure(dep) for dep in deps), package


def _violations() -> list[str]:
    bad = []
    stdlib = set(sys.stdlib_module_names)
    for path in our_files():
        src = package_of(module_name(path))
        for line, name in imports_of(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {name}"
            top = name.split(".")[0]
            if top in OURS:
                dst = package_of(name)
                if dst != src and dst not in ALLOWED[src]:
                    bad.append(f"{where}: {src} -> {dst} is not in the table")
            elif top not in stdlib:
                if src in THIRD_PARTY and top not in THIRD_PARTY[src]:
                    bad.append(f"{where}: {src} may use only {sorted(THIRD_PARTY[src])} outside the stdlib")
                if top in WEB and src not in APIS | {"api_common", "cli"}:
                    bad.append(f"{where}: the web framework stays in the API packages")
    return bad


def test_every_import_follows_the_table() -> None:
    bad = _violations()
    assert not bad, "\n".join(bad)


# A fresh interpreter per package costs seconds (torch), so the run-time check covers the packages with
# NOT_LOADED rules and the APIs; "services" walks every services package at once.
RUNTIME = sorted(NOT_LOADED.keys() | {"api_common", "party_api", "coordinator_api"})


# what the registry imports by name when a role or an API asks for a plan or a party service (run time only)
REGISTERED = frozenset(package_of(m) for m in [*registry.PROTOCOLS.values(), *registry.PARTY_SERVICES.values()])


def _runtime_allowed(package: str) -> set[str]:
    if package == "services":
        return set().union(*(_closure(p) for p in ALLOWED if p.startswith("services")))
    allowed = _closure(package)
    if "services.federation" in allowed:
        allowed |= set().union(*(_closure(p) for p in REGISTERED))
    return allowed


def test_the_registry_names_protocol_packages() -> None:
    assert REGISTERED <= PROTOCOLS, sorted(REGISTERED - PROTOCOLS)


@cache
def _loaded() -> dict[str, set[str]]:
    """Module names in sys.modules after importing each package with all its submodules, each in a fresh interpreter."""
    code = (
        "import importlib, pkgutil, sys\n"
        "root = importlib.import_module(sys.argv[1])\n"
        "if hasattr(root, '__path__'):\n"
        "    for info in pkgutil.walk_packages(root.__path__, root.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )

    def run(package: str) -> set[str]:
        out = subprocess.run([sys.executable, "-c", code, package], capture_output=True, text=True, check=True,
                             cwd=ROOT)
        return set(out.stdout.split())

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(RUNTIME, pool.map(run, RUNTIME), strict=True))


@pytest.mark.parametrize("package", RUNTIME)
def test_importing_a_package_loads_only_what_the_table_allows(package: str) -> None:
    loaded = _loaded()[package]
    ours = {package_of(m) for m in loaded if m.split(".")[0] in OURS} - {"services"}  # a parent is always loaded
    assert ours <= _runtime_allowed(package), sorted(ours - _runtime_allowed(package))
    forbidden = set().union(*(v for k, v in NOT_LOADED.items() if package == k or package.startswith(k + ".")))
    assert not {m.split(".")[0] for m in loaded} & forbidden
