"""Checks at the party's federation boundary that run before a message is converted or a run is touched.

`strict_config`: a run's settings must carry the types their fields have (a JSON `true` is not the
number 1, a string is not a number), as the coordinator's strict run settings require; the engine's
config model alone would coerce them. `check_participants_size`: a step's `participants` list may
name no more parties than the run was configured with, checked on the decoded list's length only,
before any of its entries is converted, compared or echoed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from services.errors import ValidationFailed


def _type_problem(given: Any, built: Any) -> str | None:
    """Why a given setting was coerced into its field's value, or None when it kept its kind."""
    if isinstance(given, bool) and not isinstance(built, bool):
        return "a boolean where a number or a name is expected"
    if isinstance(given, (int, float)) and not isinstance(given, bool) and isinstance(built, bool):
        return "a number where a boolean is expected"
    if isinstance(given, str) and not isinstance(built, str):
        return "a string where a number, a boolean or a list is expected"
    if isinstance(given, (int, float)) and not isinstance(given, bool) and isinstance(built, str):
        return "a number where a name is expected"
    return None


def strict_config(raw: Mapping[str, Any], config: BaseModel, *, prefix: str = "config") -> None:
    """422 naming the first setting of `raw` whose JSON type its field of `config` had to coerce."""
    for name, given in raw.items():
        if name not in type(config).model_fields:
            continue  # unknown keys are the config model's own business (it forbids or ignores them)
        built = getattr(config, name)
        if isinstance(given, Mapping) and isinstance(built, BaseModel):
            strict_config(given, built, prefix=f"{prefix}.{name}")
            continue
        problem = _type_problem(given, built)
        if problem is None and isinstance(given, (list, tuple)) and isinstance(built, (list, tuple)):
            problem = next((p for g, b in zip(given, built) if (p := _type_problem(g, b))), None)
        if problem is not None:
            raise ValidationFailed(f"invalid training config: {prefix}.{name} is {problem} ({given!r:.40})",
                                   extra={"field": f"{prefix}.{name}"})


def check_participants_size(message: Mapping[str, Any], *, configured: int) -> None:
    """422 when a step names more participants than the run's configured parties (nothing of the list echoed)."""
    names = message.get("participants")
    if names is None:
        return
    if not isinstance(names, (list, tuple)) and not hasattr(names, "__len__"):
        raise ValidationFailed("participants must be a list of party ids", extra={"field": "participants"})
    if len(names) > configured:
        raise ValidationFailed(f"participants names {len(names)} parties; this run was configured with "
                               f"{configured}", extra={"field": "participants"})
