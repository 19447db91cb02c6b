"""A coordinator run's typed settings: one model per protocol (discriminated on `protocol`) and named presets.

A run is created from a preset (default: each protocol's measured best) and the settings its
caller sets, which override the preset's. Everything is resolved, the engine config built and the
run's privacy guarantee computed before the run is stored, so a stored run always reads back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, Discriminator, Tag
from sqlalchemy.orm import Session

from services.coordinator import releases, runs
from services.coordinator.runner import RunManager, train_config
from services.crypto.interaction_dp import require_budget
from services.db.coordinator_tables import RunRow
from services.errors import DomainError, ValidationFailed
from services.federation import registry
from services.federation.plan import RunSettings

PresetName = Literal["tuned-ranking", "tuned", "verfedgnn-paper"]  # the keys of the plans' presets (tested)
# every registered protocol's API model and default preset, read off its plan
RUN_CONFIG_MODELS: dict[str, type[BaseModel]] = {p: registry.plan(p).run_model for p in registry.PROTOCOLS}
DEFAULT_PRESETS: dict[str, str] = {p: registry.plan(p).default_preset for p in registry.PROTOCOLS}
PRESETS: dict[str, Mapping[str, Any]] = {n: v for p in registry.PROTOCOLS for n, v in registry.plan(p).presets.items()}
EngineConfig = Any  # the protocol's typed config (its plan's `config`)


def _protocol_of(value: Any) -> str | None:
    """The union's tag: a body without `protocol` is the default protocol's config."""
    tag = value.get("protocol", registry.DEFAULT) if isinstance(value, dict) else getattr(value, "protocol", None)
    return tag if isinstance(tag, str) else None


if TYPE_CHECKING:
    RunConfig = RunSettings
else:  # a discriminated union of the registered protocols' models, in the registry's order
    RunConfig = Annotated[Union[tuple(Annotated[m, Tag(p)] for p, m in RUN_CONFIG_MODELS.items())],  # noqa: UP007
                          Discriminator(_protocol_of)]


def default_settings() -> RunSettings:
    """The settings of a run whose body sets none: the default protocol's model, empty."""
    return cast(RunSettings, RUN_CONFIG_MODELS[registry.DEFAULT]())  # every plan's run_model is a RunSettings


@dataclass(frozen=True)
class ResolvedRun:
    """What a new run stores: its preset, its length and every setting (protocol included)."""

    preset: str
    rounds: int
    config: dict[str, Any]
    engine: EngineConfig


def engine_config(config: Mapping[str, Any], *, seed: int, rounds: int) -> EngineConfig:
    """The engine config of a run's settings, through the protocol's plan; 422 naming the field if invalid."""
    return train_config(dict(config), seed=seed, rounds=rounds)


def check_privacy(engine: EngineConfig, *, protocol: str) -> None:
    """Compute the run's privacy record (its guarantee included) and hold it to the run's budget (409)."""
    plan = registry.plan(protocol)
    try:
        plan.privacy_record(engine)
        guarantee = plan.guarantee(engine)
    except (ArithmeticError, ValueError) as exc:  # a setting the accountant cannot compute a guarantee for
        raise ValidationFailed(f"invalid config: the run's privacy guarantee cannot be computed ({exc})",
                               extra={"field": "config.dp_epsilon"}) from exc
    budget = plan.budget(engine)
    if budget is not None:
        require_budget(guarantee, budget_epsilon=budget[0], budget_delta=budget[1])


def resolve_run(*, config: RunSettings, preset: str | None, rounds: int | None,
                seed: int, previous: WarmSource | None = None) -> ResolvedRun:
    """Preset, then the caller's settings; the engine config and privacy guarantee checked (422/409) before storing.

    A warm run (`previous`: the release it starts from) must keep that release's architecture (409 otherwise);
    its protocol's plan may adjust the settings the caller left unset.
    """
    protocol = config.protocol
    plan = registry.plan(protocol)
    name = preset or plan.default_preset
    if name not in plan.presets:
        raise ValidationFailed(f"unknown preset {name!r}; choose from {sorted(plan.presets)}", extra={"field": "preset"})
    explicit = config.explicit()
    cap, settings = plan.resolve(explicit=explicit, preset=name)
    length = rounds if rounds is not None else cap
    if previous is not None:
        try:
            settings = plan.warm_settings(previous=previous.config, settings=settings, explicit=set(explicit))
        except ValueError as exc:
            raise WarmStartRefused(f"cannot warm start from {previous.release_id}: {exc}",
                                   extra={"field": "warm_start", "release_id": previous.release_id}) from exc
    engine = engine_config(settings, seed=seed, rounds=length)
    check_privacy(engine, protocol=protocol)
    return ResolvedRun(preset=name, rounds=length, config=plan.stored_settings(engine), engine=engine)


def default_run_config(*, seed: int = 0) -> ResolvedRun:
    """What a run that sets nothing gets."""
    return resolve_run(config=default_settings(), preset=None, rounds=None, seed=seed)


def settings_table(model: type[BaseModel]) -> str:
    """A markdown table of a run config model's settings: name, type, default (the default preset's), bounds, meaning."""
    lines = ["| setting | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    return "\n".join(lines + _rows(model, ""))


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    """One row per setting; a nested settings model (FedPerGNN's `train`) gives rows named `train.<setting>`."""
    props, rows = model.model_json_schema()["properties"], []
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            rows += _rows(info.annotation, f"{prefix}{name}.")
            continue
        prop = props[name]
        rows.append(f"| `{prefix}{name}` | {_type(prop)} | {_cell(prop.get('default', '(required)'))} | "
                    f"{_bounds(prop)} | {(info.description or '').replace('|', '/')} |")
    return rows


def _type(prop: Mapping[str, Any]) -> str:
    if "enum" in prop or "const" in prop:
        return " / ".join(f"`{v}`" for v in prop.get("enum", [prop.get("const")]))
    kinds = [p.get("type", "?") for p in prop.get("anyOf", [prop])]
    return " or ".join(kinds)


def _bounds(prop: Mapping[str, Any]) -> str:
    parts = [p for p in prop.get("anyOf", [prop]) if p.get("type") in ("integer", "number")]
    if not parts:
        return ""
    p = parts[0]
    low = f"> {p['exclusiveMinimum']:g}" if "exclusiveMinimum" in p else (f"≥ {p['minimum']:g}" if "minimum" in p else "")
    high = f"< {p['exclusiveMaximum']:g}" if "exclusiveMaximum" in p else (f"≤ {p['maximum']:g}" if "maximum" in p else "")
    return ", ".join(x for x in (low, high) if x)


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`"

def presets_table() -> str:
    """A markdown table of the presets: name, the protocols' default, rounds cap and settings."""
    lines = ["| preset | default of | rounds (cap) | settings (over the engine's defaults) |", "|---|---|---|---|"]
    for name, values in PRESETS.items():
        default = ", ".join(p for p, d in DEFAULT_PRESETS.items() if d == name) or "-"
        rest = ", ".join(f"`{k}={v}`" for k, v in values.items() if k != "rounds")
        lines.append(f"| `{name}` | {default} | {values['rounds']} | {rest} |")
    return "\n".join(lines)


def settings_doc_blocks() -> dict[str, str]:
    """The generated blocks of docs/engine.md, by marker name."""
    return {"presets": presets_table(), **{f"settings:{p}": settings_table(m) for p, m in RUN_CONFIG_MODELS.items()}}


def update_settings_doc(path: str) -> None:
    """Rewrite the generated blocks (`<!-- NAME -->` … `<!-- /NAME -->`) of a markdown file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for name, block in settings_doc_blocks().items():
        start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        head, rest = text.split(start, 1)
        text = f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class WarmStartRefused(DomainError):
    """A warm start was asked for and cannot be done (no active release, another protocol or architecture)."""

    code = "warm_start_refused"
    http_status = 409


@dataclass(frozen=True)
class WarmSource:
    """The release a warm run starts from, its run and that run's stored settings."""

    release_id: str
    run_id: str
    config: dict[str, Any]


def warm_source(*, session: Session) -> WarmSource:
    """The active release a warm run would start from; 409 when none is active."""
    row = releases.active(session=session)
    if row is None:
        raise WarmStartRefused("warm_start needs an active release to start from, and none is active "
                               "(GET /v1/releases; activate one, or create the run without warm_start)",
                               extra={"field": "warm_start"})
    return WarmSource(row.release_id, row.run_id, dict(runs.get(session=session, run_id=row.run_id).config))


def start_run(*, session: Session, manager: RunManager, config: RunSettings,
              preset: str | None, rounds: int | None, min_parties: int, seed: int,
              party_ids: list[str] | None, warm_start: bool = False, max_minutes: float | None = None,
              publish_on_stop: bool = True) -> RunRow:
    """Resolve and check a run's settings, store it (409 while another run is active) and start it in the background.

    What POST /v1/runs does and what a schedule's firing does: one path, one set of checks. A warm run
    starts from the release active now (recorded in the run; 409 when none is, or its architecture differs).
    """
    previous = warm_source(session=session) if warm_start else None
    resolved = resolve_run(config=config, preset=preset, rounds=rounds, seed=seed, previous=previous)
    run = runs.create(session=session, rounds=resolved.rounds, min_parties=min_parties, seed=seed,
                      config=resolved.config, party_ids=party_ids,
                      warm_start_from=None if previous is None else previous.release_id,
                      max_minutes=max_minutes, publish_on_stop=publish_on_stop)
    manager.submit(run.run_id)
    return run
