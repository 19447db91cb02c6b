"""Side information for the tiny federations: feature CSVs with distinctive values, ingested through the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.localfed import ADMIN
from cli.main import app
from services.data.features import FeatureRow, read_feature_csv
from services.data.types import Dataset

MARK = "attrval"  # every categorical value and column name carries it, so a wire audit can search bodies for it


def _ids(ds: Dataset, kind: str) -> list[str]:
    splits = [r for r in (ds.train, ds.valid, ds.test) if r is not None]
    return sorted({str(x) for r in splits for x in (r.user_ids if kind == "user" else r.item_ids).tolist()})


def write_features(root: Path, datasets: dict[str, Dataset], *, user_party: str = "p0") -> dict[str, list[Path]]:
    """Per party, its feature files: user features at `user_party`, item features of its own items everywhere."""
    files: dict[str, list[Path]] = {}
    for pid, ds in datasets.items():
        out = []
        if pid == user_party:
            users = root / f"{pid}-users.csv"
            lines = [f"user_id,{MARK}-age,{MARK}-job"]
            lines += [f"{u},{18 + (7 * k) % 50},{MARK}-job-{k % 4}" for k, u in enumerate(_ids(ds, "user"))]
            users.write_text("\n".join(lines) + "\n")
            out.append(users)
        items = root / f"{pid}-items.csv"
        lines = [f"item_id,{MARK}-year,{MARK}-genre"]
        lines += [f"{i},{1950 + (3 * k) % 60},{MARK}-genre-{k % 5}" for k, i in enumerate(_ids(ds, "item"))]
        items.write_text("\n".join(lines) + "\n")
        files[pid] = out + [items]
    return files


def ingest_features(url: str, files: list[Path]) -> None:
    """`fedrec party ingest FILE --kind user-features|item-features` for each file (kind from its name)."""
    for path in files:
        kind = "user-features" if path.stem.endswith("users") else "item-features"
        result = CliRunner().invoke(app, ["party", "ingest", str(path), "--kind", kind, "--url", url,
                                          "--token", ADMIN])
        assert result.exit_code == 0, result.output


def feature_rows(files: dict[str, list[Path]]) -> dict[str, tuple[list[FeatureRow], list[FeatureRow]]]:
    """What each party stores, for the in-process reference."""
    out = {}
    for pid, paths in files.items():
        users = [read_feature_csv(p, id_column="user_id", max_categories=1000) for p in paths
                 if p.stem.endswith("users")]
        items = [read_feature_csv(p, id_column="item_id", max_categories=1000) for p in paths
                 if p.stem.endswith("items")]
        out[pid] = (users[0] if users else [], items[0] if items else [])
    return out
