"""Feature files: CSV and ML-100K readers, the one-line refusals, and the model's attribute tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.data.features import (
    FeatureRow,
    read_feature_csv,
    read_ml100k_items,
    read_ml100k_users,
)
from services.data.parsing import DataFormatError
from services.verfedgnn.features import feature_edges

ML100K = Path("/work/shared/data/ml-100k")


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "f.csv"
    path.write_text(text)
    return path


def test_csv_columns_are_numeric_or_categorical(tmp_path: Path) -> None:
    path = _csv(tmp_path, "user_id,age,job,zip\nu1,24,tech,55105\nu2,,writer,\nu3,53.5,tech,94043\n")
    rows = read_feature_csv(path, id_column="user_id", max_categories=10, categorical=["zip"])
    assert FeatureRow("u1", "age", number=24.0) in rows and FeatureRow("u3", "age", number=53.5) in rows
    assert FeatureRow("u2", "job", text="writer") in rows and FeatureRow("u1", "zip", text="55105") in rows
    assert not any(r.entity_id == "u2" and r.name in ("age", "zip") for r in rows)  # an empty cell: no value


@pytest.mark.parametrize(("text", "kwargs", "message"), [
    ("id,age\nu1,3\n", {}, "unknown id column 'user_id' (columns: id, age)"),
    ("user_id,age\nu1,24\nu2,young\n", {}, "line 3: column 'age' mixes types: 'young' is not a number but '24' is"),
    ("user_id,job\nu1,a\nu2,b\nu3,c\n", {"max_categories": 2},
     "column 'job' has 3 distinct values, over the cap of 2 (--max-categories)"),
    ("user_id,job\nu1,a\nu1,b\n", {}, "line 3: id 'u1' appears twice"),
    ("user_id,job\nu1,a,extra\n", {}, "line 2: expected 2 fields, found 3"),
])
def test_bad_csv_is_refused_in_one_line(tmp_path: Path, text: str, kwargs: dict[str, int], message: str) -> None:
    path = _csv(tmp_path, text)
    with pytest.raises(DataFormatError) as err:
        read_feature_csv(path, id_column="user_id", **{"max_categories": 100, **kwargs})
    assert message in str(err.value.detail) and "\n" not in str(err.value.detail)


@pytest.mark.skipif(not (ML100K / "u.user").is_file(), reason="ML-100K not present")
def test_ml100k_users_and_items() -> None:
    users = read_ml100k_users(ML100K / "u.user")
    assert FeatureRow("1", "age", number=24.0) in users and FeatureRow("1", "occupation", text="technician") in users
    assert len({r.entity_id for r in users}) == 943
    items = read_ml100k_items(ML100K / "u.item")
    assert FeatureRow("1", "year", number=1995.0) in items
    assert {r.text for r in items if r.entity_id == "1"} == {None, "Animation", "Children's", "Comedy"}


def test_tokens_are_order_free_and_bin_numbers() -> None:
    rows = [FeatureRow(f"u{k}", "age", number=float(10 * k)) for k in range(8)]
    rows += [FeatureRow("u0", "job", text="a"), FeatureRow("u5", "job", text="b"), FeatureRow("zz", "job", text="c")]
    index = {f"u{k}": k for k in range(8)}
    edges = feature_edges(rows, index)
    again = feature_edges(list(reversed(rows)), dict(reversed(list(index.items()))))
    assert edges is not None and again is not None
    assert np.array_equal(edges.entities, again.entities) and np.array_equal(edges.tokens, again.tokens)
    assert edges.n_tokens == 4 + 2  # four age bins, two job values of indexed users ("c" is not one)
    assert np.all(np.diff(edges.entities) >= 0) and len(edges.entities) == 8 + 2
    ages = edges.tokens[np.isin(np.arange(len(edges.tokens)), np.flatnonzero(edges.tokens >= 0))]
    assert len(set(ages.tolist())) == 6
    assert feature_edges(rows, {"nobody": 0}) is None
