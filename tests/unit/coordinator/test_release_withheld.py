"""A release whose parties withheld their validation figures under DP: recorded with the reason, shown as such."""

from __future__ import annotations

from cli.release import _figure, withheld_line
from services.coordinator.releases import served_rmse, withheld

REASON = "withheld: dp_epsilon set; ... outside the run's differential-privacy accounting"


def test_withheld_answers_are_recorded_per_party_and_add_no_served_error() -> None:
    answers = {"p1": {"version": 2, "value": [], "valid_sse": None, "valid_count": None, "withheld": REASON},
               "p0": {"version": 3, "value": [], "withheld": REASON}}
    assert withheld(answers) == {"p0": REASON, "p1": REASON}
    assert served_rmse(answers) is None
    assert withheld({"p0": {"version": 1, "value": [], "valid_sse": 4.0, "valid_count": 4}}) is None


def test_the_cli_says_withheld_under_dp_rather_than_a_figure() -> None:
    assert _figure(None, withheld={"p0": REASON}) == "withheld (DP)"
    assert _figure(None) == "-" and _figure(0.5, withheld={"p0": REASON}) == "0.5000"
    line = withheld_line({"p1": REASON, "p0": REASON})
    assert line.startswith("value report and served validation errors withheld under DP at p0, p1 (")
    assert line.count(REASON) == 1
