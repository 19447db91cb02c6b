"""`fedrec demo`'s top-K tables compare like with like: the merged list beside its baselines on the merged
catalogue; each party alone beside the same party federated on that party's catalogue."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import cli.demo as demo_mod
from services.evaluation.report import RANKING_COLUMNS


def _figures(ndcg: float) -> dict[str, float]:
    return {**{c: 0.5 for c in RANKING_COLUMNS}, "ndcg@10": ndcg, "median_train_count": 42.0}


def _render(monkeypatch: pytest.MonkeyPatch, merged: dict[str, float], own: dict[str, tuple[float, float]]) -> str:
    printed = io.StringIO()
    monkeypatch.setattr(demo_mod, "console", Console(file=printed, width=240))
    demo_mod._ranking({demo_mod.SERVED: _figures(merged["served"]), demo_mod.MOST_POPULAR: _figures(merged["pop"]),
                       demo_mod.EASE: _figures(merged["ease"])},
                      {p: {"alone": _figures(a), "federated": _figures(f)} for p, (a, f) in own.items()})
    return printed.getvalue()


def _rows(text: str) -> list[str]:
    """The first cell of every table row, in order."""
    return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]


def test_merged_table_then_one_section_per_party(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _render(monkeypatch, {"served": 0.56, "pop": 0.30, "ease": 0.45},
                  {"party0": (0.55, 0.58), "party1": (0.49, 0.54)})
    assert _rows(out) == [demo_mod.SERVED, "most popular", "EASE (λ on validation)",
                          "party0 alone (local-only, in-process)", "party0 federated (served by party0)",
                          "party1 alone (local-only, in-process)", "party1 federated (served by party1)"]
    merged_at, own_at = out.index("top-K of the merged list"), out.index("top-K of each party's own list")
    assert merged_at < out.index(demo_mod.SERVED) < own_at < out.index("party0 alone")
    assert "merged list NDCG@10 0.5600 (most popular 0.3000, EASE 0.4500): ahead of both" in out
    assert "federated beats the party alone for 2/2 parties (NDCG@10)" in out and "(not all)" not in out
    # party0's two rows and party1's two rows are separate sections of the second table
    assert out[out.index("party0 federated"):out.index("party1 alone")].count("├") == 1


def test_verdicts_name_what_falls_short(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _render(monkeypatch, {"served": 0.40, "pop": 0.30, "ease": 0.45},
                  {"party0": (0.55, 0.58), "party1": (0.54, 0.49)})
    assert "not ahead of EASE (λ on validation)" in out and "not ahead of most popular" not in out
    assert "federated beats the party alone for 1/2 parties (NDCG@10) (not all)" in out
