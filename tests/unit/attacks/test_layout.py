"""The attack suite reads the engines; the engines never know about it (imports checked statically)."""

from __future__ import annotations

from pathlib import Path

from tests.support.layout import ROOT, imported_modules, layering_violations

ATTACKS = ["fake_users", "scoring", "search", "coordinator", "deanonymization", "gradient", "views", "suite"]
FEDPERGNN = ["ldp", "messages", "config", "relay", "party", "rounds", "plan"]


def test_attack_and_baseline_packages_are_layered() -> None:
    assert layering_violations("services.attacks", ATTACKS) == []
    assert layering_violations("services.fedpergnn", FEDPERGNN) == []


def test_protocols_never_import_the_attack_suite_or_the_report() -> None:
    """Recording is a link decorator inside the engine; attacks, baselines and reports stay outside it."""
    outside = ("services.attacks", "services.privacy", "services.evaluation", "services.fedpergnn")
    for package in ("services.verfedgnn", "services.fedpergnn"):
        forbidden = tuple(p for p in outside if p != package)
        for path in sorted(Path(ROOT, *package.split(".")).glob("*.py")):
            deps = imported_modules(package, path.stem)
            assert not {d for d in deps if d.startswith(forbidden)}, (package, path.stem)
