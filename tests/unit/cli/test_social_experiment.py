"""`fedrec experiment --protocol social-gnn` on a CSV pair (ratings.csv + links.csv): per-slice summary written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from cli.main import app
from services.data.csv import write_links_csv, write_ratings_csv
from services.data.types import Ratings, SocialLinks


def test_social_experiment_runs_on_a_csv_pair_and_writes_every_slice(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    users = rng.integers(0, 40, 600)
    items = rng.integers(0, 30, 600)
    ratings = np.clip(np.round(3 + (users % 2) * 2 - (items % 2) * 2 + rng.normal(0, 0.5, 600)), 1, 10)
    write_ratings_csv(tmp_path / "ratings.csv", Ratings(users.astype(str), items.astype(str),
                                                        ratings.astype(np.float32), np.zeros(600, dtype=np.int64)))
    src = rng.integers(0, 40, 60)
    write_links_csv(tmp_path / "links.csv", SocialLinks(src.astype(str), ((src + 2) % 40).astype(str),
                                                        np.ones(60, dtype=np.float32)))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["experiment", "--protocol", "social-gnn", "--data", str(tmp_path),
                                      "--seeds", "1", "--rounds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results-social.json").read_text())
    assert set(summary["slices"]) == {"lightgcn", "p4gcn_nodp", "p4gcn_dp", "p4gcn_dp_nolinks"}
    assert set(summary["slices"]["p4gcn_dp"]) == {"all", "cold_start", "with_links", "without_links"}
    assert summary["records"]["p4gcn_dp"][0]["privacy"]["epsilon_spent"] <= 10.0
    assert "| p4gcn_dp |" in result.output
