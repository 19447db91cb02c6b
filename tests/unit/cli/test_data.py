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


@pytest.mark.skipif(not (DATA / "ml-100k").is_dir(), reason="shared data sets absent")
def test_split_ml100k_by_genre_with_partial_overlap(tmp_path: Path) -> None:
    out = tmp_path / "g"
    args = ["data", "split", str(DATA / "ml-100k"), "--out", str(out), "--by", "genre", "--overlap", "0.5",
            "--seed", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    parts = _party_files(out, 2)
    manifest = json.loads((out / "manifest.json").read_text())
    owner = manifest["genre_parties"]
    genres = {line.split("|")[0]: line for line in (DATA / "ml-100k" / "u.item").read_text("latin-1").splitlines()}
    names = [g.split("|")[0] for g in (DATA / "ml-100k" / "u.genre").read_text().splitlines() if g]
    for k, p in enumerate(parts):  # every item lies at the party owning its primary genre
        for item in np.unique(p.item_ids).tolist():
            flags = genres[item].split("|")[5:]
            assert owner[next((g for g, f in zip(names, flags) if f == "1"), "unknown")] == k
    users = [set(p.user_ids.tolist()) for p in parts]
    assert len(users[0] & users[1]) <= manifest["shared_users"] == round(0.5 * 943)
    assert len(users[0] | users[1]) <= 943 and manifest["by"] == "genre" and manifest["overlap"] == 0.5


def test_split_implicit_threshold_and_bad_options(tmp_path: Path) -> None:
    src = tmp_path / "r.csv"
    src.write_text("user_id,item_id,rating\n1,a,5\n1,b,2\n2,a,4\n2,c,3\n3,b,4.5\n")
    out = tmp_path / "imp"
    result = runner.invoke(app, ["data", "split", str(src), "--out", str(out), "--implicit", "4"])
    assert result.exit_code == 0, result.output
    rows = [(u, i, r) for p in _party_files(out, 2)
            for u, i, r in zip(p.user_ids.tolist(), p.item_ids.tolist(), p.ratings.tolist())]
    assert sorted(rows) == [("1", "a", 1.0), ("2", "a", 1.0), ("3", "b", 1.0)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["feedback"] == "implicit" and manifest["implicit_threshold"] == 4.0
    assert manifest["ratings"] == 3 and manifest["input_ratings"] == 5
    for bad, says in ((["--overlap", "0"], "--overlap"), (["--by", "year"], "--by"),
                      (["--by", "genre"], "MovieLens")):
        result = runner.invoke(app, ["data", "split", str(src), "--out", str(out), *bad])
        assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
