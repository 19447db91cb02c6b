"""docs/settings.md lists exactly the PARTY_* and COORD_* variables of the settings classes, with their defaults."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic_settings import BaseSettings

from services.config import CoordinatorSettings, PartySettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
SECTIONS: dict[str, type[BaseSettings]] = {"## Party (`PARTY_*`)": PartySettings, "## Coordinator (`COORD_*`)": CoordinatorSettings}


def _shown(value: object) -> str:
    """A default as the doc writes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _expected(cls: type[BaseSettings]) -> dict[str, str]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return {f"{prefix}{name}".upper(): _shown(f.default_factory() if f.default_factory else f.default)  # type: ignore[call-arg]
            for name, f in cls.model_fields.items()}


def _documented(heading: str) -> dict[str, str]:
    """Variable → first value of its Default cell, for the table under `heading`."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([A-Z0-9_]+)`", cells[0]) if len(cells) == 3 else None
        if match:
            default = re.match(r"`([^`]*)`", cells[1])
            assert default and cells[2], f"{match.group(1)}: a default in backticks and a meaning"
            assert match.group(1) not in rows, f"{match.group(1)} listed twice"
            rows[match.group(1)] = default.group(1)
    return rows


def test_every_setting_is_documented_with_its_default_and_nothing_else() -> None:
    for heading, cls in SECTIONS.items():
        expected, documented = _expected(cls), _documented(heading)
        assert sorted(set(expected) - set(documented)) == [], f"{cls.__name__} fields missing from docs/settings.md"
        assert sorted(set(documented) - set(expected)) == [], f"docs/settings.md lists variables {cls.__name__} lacks"
        wrong = {k: (documented[k], v) for k, v in expected.items() if documented[k] != v}
        assert wrong == {}, f"documented vs actual defaults: {wrong}"
