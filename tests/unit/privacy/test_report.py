"""The privacy report claims only figures the shipped benchmark file holds, for the row with the run's mechanisms."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.attacks.suite import PROTOCOLS
from services.privacy.report import MEASURED_FILE, load_measured, privacy_report
from services.verfedgnn.config import TrainConfig

SHARES = ("0.2", "0.5", "0.8")


def _tuned() -> TrainConfig:
    from services.evaluation.runner import preset_values
    return TrainConfig(**preset_values(load_measured()["setup"]["preset"], "gcn"))


def test_shipped_file_is_the_benchmarks_output() -> None:
    """Every protocol × share with precision/recall/F1, the coordinator's F1, RMSE, and the producing command."""
    data = json.loads(MEASURED_FILE.read_text())
    assert data["schema"] == 1 and data["produced_by"].startswith("python benchmarks/attacks.py ")
    fig = data["figures"]
    for proto in PROTOCOLS:
        for attack in ("deanonymization", "gradient"):
            assert set(fig[attack][proto]) == set(SHARES)
            for share in SHARES:
                assert {"precision", "recall", "f1"} <= set(fig[attack][proto][share])
        assert 0.0 <= fig["coordinator"][proto]["f1"] <= 1.0 and 0.5 < fig["rmse"][proto] < 1.5
        assert proto in data["setup"]["mechanisms"]


@pytest.mark.parametrize(("switches", "row"), [((True, True), "verfedgnn"), ((True, False), "projection_only")])
def test_report_figures_are_the_files_figures(switches: tuple[bool, bool], row: str) -> None:
    """Each number the report shows is the file's number at the same place, for the matching row and the baseline."""
    config = _tuned().model_copy(update={"use_projection": switches[0], "use_quantization": switches[1]})
    report = privacy_report(config)
    fig = load_measured()["figures"]
    measured = report["measured"]
    assert report["protocol"] == row and report["mechanisms"] == config.privacy_record()
    for name, got in ((row, measured), ("fedpergnn", measured["baseline"]["fedpergnn"])):
        assert got["deanonymization_f1"] == {s: fig["deanonymization"][name][s]["f1"] for s in SHARES}
        assert got["gradient_f1"] == {s: fig["gradient"][name][s]["f1"] for s in SHARES}
        assert got["coordinator_f1"] == fig["coordinator"][name]["f1"]
        assert got["coordinator_popularity_f1"] == fig["coordinator"][name]["popularity_f1"]
        assert got["rmse"] == fig["rmse"][name]
    multi = fig["deanonymization_multiround"][row]
    assert measured["deanonymization_multiround_f1"] == {s: multi[s]["f1"] for s in SHARES}
    assert measured["deanonymization_multiround_popularity_f1"] == {s: multi[s]["popularity_f1"] for s in SHARES}
    assert "deanonymization_multiround_f1" not in measured["baseline"]["fedpergnn"]
    assert measured["settings_match"] and measured["differences"] == []


def test_report_reads_the_figures_it_is_given() -> None:
    """Change the file's figures and the report changes with them: nothing is hard-coded."""
    altered: dict[str, Any] = copy.deepcopy(load_measured())
    altered["figures"]["deanonymization"]["verfedgnn"]["0.5"]["f1"] = 0.777
    altered["figures"]["coordinator"]["verfedgnn"]["f1"] = 0.555
    report = privacy_report(_tuned(), measured=altered)
    assert report["measured"]["deanonymization_f1"]["0.5"] == 0.777
    assert report["measured"]["coordinator_f1"] == 0.555


def test_other_settings_are_named_and_unprotected_runs_get_no_figures() -> None:
    """A different q is reported as a difference; with both mechanisms off nothing measured applies."""
    report = privacy_report(_tuned().model_copy(update={"q_ratio": 0.3}))
    assert not report["measured"]["settings_match"]
    assert any(d.startswith("projection.q_ratio: run 0.3") for d in report["measured"]["differences"])
    off = privacy_report(TrainConfig(use_projection=False, use_quantization=False))
    assert off["measured"] is None and off["protocol"] is None and "off" in off["note"]
