"""benchmarks/privacy_frontier.py: the requirement check, the best-point choice, the grid syntax and the cache."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import privacy_frontier as pf


def _row(q: float, *, deanon: list[float], grad: list[float], ndcg: float, rmse: float) -> dict[str, Any]:
    shares = ("0.2", "0.5", "0.8")
    return {"q_ratio": q, "r": 3.0, "grad_scale": 0.05, "clip_bound": 0.5, "ndcg@10": ndcg, "rmse": rmse,
            "f1": {"deanonymization": dict(zip(shares, deanon)), "gradient": dict(zip(shares, grad))}}


def test_summarize_takes_the_max_over_shares_and_attackers_and_picks_the_best_ok_row() -> None:
    rows = [_row(0.2, deanon=[0.013, 0.012, 0.012], grad=[0.004, 0.002, 0.004], ndcg=0.42, rmse=0.93),
            _row(0.3, deanon=[0.015, 0.019, 0.012], grad=[0.004, 0.002, 0.004], ndcg=0.43, rmse=0.92),
            # one share above the bar is enough to fail, whatever the utility
            _row(0.5, deanon=[0.0204, 0.012, 0.012], grad=[0.004, 0.002, 0.004], ndcg=0.44, rmse=0.91)]
    best = pf.summarize(rows, max_f1=0.02)
    assert [r["ok"] for r in rows] == [True, True, False]
    assert rows[2]["max_f1"] == {"deanonymization": 0.0204, "gradient": 0.004}
    assert [r["best_ok"] for r in rows] == [False, True, False]
    assert best == {"q_ratio": 0.3, "r": 3.0, "grad_scale": 0.05, "clip_bound": 0.5}


def test_summarize_breaks_ndcg_ties_by_rmse_and_returns_none_when_nothing_passes() -> None:
    rows = [_row(0.2, deanon=[0.01] * 3, grad=[0.01] * 3, ndcg=0.42, rmse=0.93),
            _row(0.3, deanon=[0.01] * 3, grad=[0.01] * 3, ndcg=0.42, rmse=0.92)]
    assert pf.summarize(rows, max_f1=0.02) == {"q_ratio": 0.3, "r": 3.0, "grad_scale": 0.05, "clip_bound": 0.5}
    failing = [_row(0.2, deanon=[0.01] * 3, grad=[0.03, 0.01, 0.01], ndcg=0.42, rmse=0.93)]
    assert pf.summarize(failing, max_f1=0.02) is None
    assert failing[0]["ok"] is False and failing[0]["best_ok"] is False


def test_parse_point_accepts_dials_only() -> None:
    assert pf.parse_point("q_ratio=0.3, r=2") == {"q_ratio": 0.3, "r": 2.0}
    assert pf.parse_point("") == {}
    with pytest.raises(argparse.ArgumentTypeError, match="lr=0.1"):
        pf.parse_point("lr=0.1")
    with pytest.raises(argparse.ArgumentTypeError, match="'x' is not a number"):
        pf.parse_point("r=x")


def test_cache_computes_once_and_keys_on_what_changes_the_figures(tmp_path: Path) -> None:
    dials = {"q_ratio": 0.2, "r": 3.0, "grad_scale": 0.05, "clip_bound": 0.5}
    ident: dict[str, Any] = {"data": "d", "seed": 0, "dials": dials}
    key = pf.cache_key("attacks", ident)
    calls: list[int] = []

    def compute() -> dict[str, Any]:
        calls.append(1)
        return {"f1": 0.01}

    assert pf.cached(tmp_path, key, compute) == ({"f1": 0.01}, False)
    assert pf.cached(tmp_path, key, compute) == ({"f1": 0.01}, True)
    assert len(calls) == 1
    assert not list(tmp_path.glob("*.tmp"))
    moved = {**ident, "dials": {**dials, "r": 2.0}}
    assert pf.cache_key("attacks", moved) != key
    assert pf.cache_key("attacks", {**ident, "seed": 1}) != key
    assert pf.cache_key("utility", ident) != key


def test_main_computes_each_part_once_then_reports_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Through main: a missing point under --cached-only, computed parts cached, a rerun computing nothing."""
    calls: list[str] = []
    f1 = {"0.2": 0.012, "0.5": 0.03, "0.8": 0.011}  # share 0.5 breaks the 0.02 bar

    def attack_data(*_: Any, **__: Any) -> str:
        calls.append("attack data")
        return "fed"

    def ranking_data(*_: Any, **__: Any) -> tuple[str, str]:
        calls.append("ranking data")
        return "p", "v"

    monkeypatch.setattr(pf, "attack_federation", attack_data)
    monkeypatch.setattr(pf, "ranking_federation", ranking_data)

    def attacks(fed: str, *, config: Any, shares: list[float], seed: int) -> dict[str, Any]:
        calls.append(f"attacks q={config.q_ratio}")
        return {a: {s: {"f1": f, "precision": 0.1, "recall": 0.01, "popularity_f1": 0.06} for s, f in f1.items()}
                for a in pf.ATTACKS}

    def utility(parties: str, view: str, *, config: Any) -> dict[str, Any]:
        calls.append(f"utility q={config.q_ratio} secure={config.secure_aggregation}")
        return {"ndcg@10": 0.42, "recall@10": 0.41, "rmse": 0.92, "best_round": 120}

    monkeypatch.setattr(pf, "attack_figures", attacks)
    monkeypatch.setattr(pf, "utility_figures", utility)

    def run(*extra: str) -> dict[str, Any]:
        pf.main(["--cache", str(tmp_path), "--point", "", "--point", "q_ratio=0.3", *extra])
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    out = run("--cached-only")
    assert calls == [] and out["rows"] == [] and out["best_ok"] is None
    assert [m["q_ratio"] for m in out["missing"]] == [0.2, 0.3]
    out = run()
    assert calls == ["attack data", "attacks q=0.2", "ranking data", "utility q=0.2 secure=True",
                     "attacks q=0.3", "utility q=0.3 secure=True"]
    default, moved = out["rows"]
    assert default["default"] is True and default["label"] == "default" and moved["label"] == "q_ratio=0.3"
    assert default["max_f1"] == {"deanonymization": 0.03, "gradient": 0.03} and default["ok"] is False
    assert out["best_ok"] is None and out["missing"] == []
    calls.clear()
    again = run("--cached-only")
    assert calls == [] and again["rows"] == out["rows"]
