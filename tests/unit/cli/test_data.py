"""`fedrec data synth` and `fedrec data split` write consistent per-party CSV files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from services.data.csv import read_csv_links, read_csv_ratings
from services.data.formats import detect_format
from tests.support.layout import DATA

runner = CliRunner()


def _party_files(out: Path, n: int) -> list:
    files = sorted(out.glob("party*.csv"))
    assert [f.name for f in files] == [f"party{k}.csv" for k in range(n)]
    return [read_csv_ratings(f) for f in files]


def test_synth_writes_disjoint_party_files_and_social(tmp_path: Path) -> None:
    out = tmp_path / "syn"
    args = [
        "data",
        "synth",
        "--out",
        str(out),
        "--users",
        "300",
        "--items",
        "120",
        "--ratings",
        "4000",
        "--parties",
        "3",
        "--seed",
        "9",
        "--social",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["ratings"] == 4000
    assert "generating 300 users" in result.stderr
    parts = _party_files(out, 3)
    assert sum(len(p) for p in parts) == 4000
    item_sets = [set(p.item_ids.tolist()) for p in parts]
    assert all(a.isdisjoint(b) for i, a in enumerate(item_sets) for b in item_sets[i + 1 :])
    assert (out / "party0.csv").read_text().splitlines()[0] == "user_id,item_id,rating,timestamp"
    links = read_csv_links(out / "social.csv")
    assert links.src.size > 300 and not np.any(links.src == links.dst)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [p["ratings"] for p in manifest["parties"]] == [len(p) for p in parts]
    # Same seed, same bytes.
    again = tmp_path / "again"
    assert runner.invoke(app, [*args[:3], str(again), *args[4:]]).exit_code == 0
    assert (again / "party1.csv").read_bytes() == (out / "party1.csv").read_bytes()


def test_synth_rejects_impossible_sizes(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "data",
            "synth",
            "--out",
            str(tmp_path),
            "--users",
            "100",
            "--items",
            "10",
            "--ratings",
            "50",
        ],
    )
    assert result.exit_code != 0 and "cannot place" in result.output


@pytest.mark.skipif(not (DATA / "ml-100k").is_dir(), reason="shared data sets absent")
def test_split_ml100k_into_parties(tmp_path: Path) -> None:
    out = tmp_path / "ml"
    result = runner.invoke(
        app,
        [
            "data",
            "split",
            str(DATA / "ml-100k"),
            "--out",
            str(out),
            "--parties",
            "2",
            "--shares",
            "0.2,0.8",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    parts = _party_files(out, 2)
    assert sum(len(p) for p in parts) == 100_000
    sizes = [np.unique(p.item_ids).size for p in parts]
    assert sum(sizes) <= 1682 and abs(sizes[0] - 0.2 * 1682) <= 5
    assert set(parts[0].user_ids.tolist()) | set(parts[1].user_ids.tolist()) == {
        str(u) for u in range(1, 944)
    }
    assert not (out / "social.csv").exists()


def test_split_reports_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "r.csv"
    bad.write_text("user_id,item_id,rating\n1,2,3\n1,2\n")
    result = runner.invoke(app, ["data", "split", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "line 3" in result.stderr
    result = runner.invoke(
        app, ["data", "split", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "not found" in result.stderr
    assert detect_format(bad) == "csv"
