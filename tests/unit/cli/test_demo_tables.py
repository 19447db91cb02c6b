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


def _render(monkeypatch: pytest.MonkeyPatch, merged: dict[str, float],
            own: dict[str, tuple[float, float] | tuple[float, float, float]]) -> str:
    printed = io.StringIO()
    monkeypatch.setattr(demo_mod, "console", Console(file=printed, width=240))
    demo_mod._ranking({demo_mod.SERVED: _figures(merged["served"]), demo_mod.MOST_POPULAR: _figures(merged["pop"]),
                       demo_mod.EASE: _figures(merged["ease"])},
                      {p: {"alone": _figures(v[0]), "federated": _figures(v[1]),
                           "ease": _figures(v[2] if len(v) > 2 else 0.1)} for p, v in own.items()})
    return printed.getvalue()


def _rows(text: str) -> list[str]:
    """The first cell of every table row, in order."""
    return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]


def test_merged_table_then_one_section_per_party(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _render(monkeypatch, {"served": 0.56, "pop": 0.30, "ease": 0.45},
                  {"party0": (0.55, 0.58), "party1": (0.49, 0.54)})
    assert _rows(out) == [demo_mod.SERVED, "most popular", "EASE (λ on validation)",
                          "party0 alone: GNN (local-only, in-process)", "party0 alone: EASE (in-process)",
                          "party0 served by party0 (federated + its EASE)",
                          "party1 alone: GNN (local-only, in-process)", "party1 alone: EASE (in-process)",
                          "party1 served by party1 (federated + its EASE)"]
    merged_at, own_at = out.index("top-K of the merged list"), out.index("top-K of each party's own list")
    assert merged_at < out.index(demo_mod.SERVED) < own_at < out.index("party0 alone")
    assert "merged list NDCG@10 0.5600 (most popular 0.3000, EASE 0.4500): ahead of both" in out
    assert "the served list beats the party alone (GNN and EASE) for 2/2 parties (NDCG@10)" in out
    assert "(not all)" not in out
    # party0's three rows and party1's three rows are separate sections of the second table
    assert out[out.index("party0 served by"):out.index("party1 alone")].count("├") == 1


def test_verdicts_name_what_falls_short(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _render(monkeypatch, {"served": 0.40, "pop": 0.30, "ease": 0.45},
                  {"party0": (0.55, 0.58), "party1": (0.54, 0.49)})
    assert "not ahead of EASE (λ on validation)" in out and "not ahead of most popular" not in out
    assert "the served list beats the party alone (GNN and EASE) for 1/2 parties (NDCG@10) (not all)" in out
    # a party whose own EASE ranks better than what it serves does not count as a win
    out = _render(monkeypatch, {"served": 0.56, "pop": 0.30, "ease": 0.45},
                  {"party0": (0.55, 0.58, 0.60), "party1": (0.49, 0.54, 0.50)})
    assert "for 1/2 parties (NDCG@10) (not all)" in out
