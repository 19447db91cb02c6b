"""What joining a run costs in privacy: its mechanisms, their parameters, and the attacks measured against them.

The measured figures are not computed here: they are read from `measured_attacks.json`, the
output of the attack benchmark on a reference data set, shipped with the product together with
the command that produced it (regenerate with that command; see docs/privacy.md).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from services.verfedgnn.config import TrainConfig

MEASURED_FILE = Path(__file__).with_name("measured_attacks.json")
SCHEMA = 1
# (use_projection, use_quantization) -> the benchmark's protocol row with those mechanisms
ROWS = {(True, True): "verfedgnn", (True, False): "projection_only"}
BASELINE = "fedpergnn"
SECURE_COORDINATOR = "verfedgnn_secure"  # the coordinator attack against a secure-aggregation run
# Secure aggregation changes nothing a party sees (the relayed sum is the same), only what the
# coordinator sees, and the coordinator figure is then read from SECURE_COORDINATOR.
NOT_COMPARED = ("secure_aggregation.", "randomness.")


@lru_cache(maxsize=4)
def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    return data


def load_measured(path: Path | None = None) -> dict[str, Any]:
    """The shipped benchmark figures (cached; ValueError for another schema version)."""
    return _read(path or MEASURED_FILE)


def _flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _same(a: object, b: object) -> bool:
    """Equal, with floats compared to the 4 decimals the figures file keeps."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, float(b), rel_tol=1e-3, abs_tol=1e-4)
    return a == b


def protocol_figures(measured: dict[str, Any], protocol: str) -> dict[str, Any]:
    """One protocol row of the benchmark: attack F1 per attacker share, the coordinator's F1, RMSE."""
    fig = measured["figures"]
    out = {
        "deanonymization_f1": {s: v["f1"] for s, v in fig["deanonymization"][protocol].items()},
        "gradient_f1": {s: v["f1"] for s, v in fig["gradient"][protocol].items()},
        "coordinator_f1": fig["coordinator"][protocol]["f1"],
        "coordinator_popularity_f1": fig["coordinator"][protocol]["popularity_f1"],
        "rmse": fig["rmse"][protocol],
    }
    if protocol in fig.get("deanonymization_multiround", {}):  # measured for aggregate-based protocols only
        rows = fig["deanonymization_multiround"][protocol]
        out["deanonymization_multiround_f1"] = {s: v["f1"] for s, v in rows.items()}
        out["deanonymization_multiround_popularity_f1"] = {s: v["popularity_f1"] for s, v in rows.items()}
    return out


NO_REPORT = {"note": "no attack figures are measured for this protocol"}


def run_report(config: Any) -> dict[str, Any]:
    """A run's report as its status shows it: the shipped attack figures were measured on VerFedGNN's mechanisms
    only, so another protocol's run gets NO_REPORT."""
    return privacy_report(config) if isinstance(config, TrainConfig) else NO_REPORT


def privacy_report(config: Any, *, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mechanisms and parameters of a run, and the measured attack F1 of the benchmark row with the same mechanisms.

    `settings_match` is False (and `differences` names the parameters) when the run's privacy
    parameters differ from those the figures were measured at; the figures then describe the
    reference settings, not this run.
    """
    data = load_measured() if measured is None else measured
    record = config.privacy_record()
    if not hasattr(config, "use_projection"):  # the FedPerGNN baseline: its own mechanisms, its measured row
        return {"mechanisms": record, "protocol": BASELINE,
                "measured": {"figures": protocol_figures(data, BASELINE), "settings_match": None}}
    row = ROWS.get((config.use_projection, config.use_quantization))
    report: dict[str, Any] = {"mechanisms": record, "protocol": row, "measured": None}
    if row is None:
        report["note"] = "no attack figures are measured for these settings (a protection is off)"
        return report
    reference = {k: v for k, v in _flat(data["setup"]["mechanisms"][row]).items() if not k.startswith(NOT_COMPARED)}
    mine = _flat(record)
    differences = [f"{k}: run {mine.get(k)!r}, measured {reference.get(k)!r}"
                   for k in sorted(reference) if not _same(mine.get(k), reference.get(k))]
    not_measured = sorted(k for k in set(mine) - set(reference) if not k.startswith(NOT_COMPARED))
    figures = protocol_figures(data, row)
    secure = data["figures"]["coordinator"].get(SECURE_COORDINATOR)
    if config.secure_aggregation and row == "verfedgnn" and secure is not None:
        figures |= {"coordinator_f1": secure["f1"], "coordinator_popularity_f1": secure["popularity_f1"],
                    "coordinator_row": SECURE_COORDINATOR}
    report["measured"] = {
        "source": MEASURED_FILE.name, "schema": data["schema"], "produced_by": data["produced_by"],
        "measured_at": data["measured_at"], "reference_data": data["setup"]["data"],
        "attacker": "party0 (fake users rate one victim item each; share = attacked fraction of the victim's items)",
        "settings_match": not differences, "differences": differences,
        "not_measured": not_measured,
        **figures,
        "baseline": {BASELINE: protocol_figures(data, BASELINE)},
    }
    return report
