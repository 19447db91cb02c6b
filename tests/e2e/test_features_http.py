"""Side information over real HTTP: features ingested with `fedrec party ingest`, a run, the wire audit.

Every federation body is recorded at the party boundary: no attribute value or column name crosses it and no
array has an axis of attribute nodes; the run matches the in-process reference built on the same attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from services.protocol.federation import unpack_tree
from services.verfedgnn.config import run_config
from services.verfedgnn.reference import party_datas, run_reference
from tests.e2e.test_federation_http import Recorder
from tests.support.features import MARK, feature_rows, ingest_features, write_features
from tests.support.federation import TINY_CONFIG, Federation, federation, tiny_parties

ROUNDS, SEED = 4, 5


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Any], list[Any], Any]]:
    """One completed run over parties that hold features, every federation body recorded."""
    log: list[tuple[str, str, bytes, bytes]] = []
    root = tmp_path_factory.mktemp("features")
    datasets = tiny_parties(2)
    files = write_features(root, datasets)
    with federation(root, datasets=datasets, wrap=lambda pid, app: Recorder(pid, app, log)) as fed:
        for pid, live in fed.parties.items():
            ingest_features(live.url, files[pid])
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300)
        yield fed, status, log, feature_rows(files)


def test_run_with_features_matches_the_inprocess_reference(done: tuple[Federation, dict[str, Any], list[Any], Any],
                                                           ) -> None:
    fed, status, _, rows = done
    assert status["state"] == "completed", status["detail"]
    config = run_config(TINY_CONFIG, seed=SEED, rounds=ROUNDS)
    ref = run_reference(parties=fed.datasets, config=config, rounds=ROUNDS, features=rows)
    plain = run_reference(parties=fed.datasets, config=config, rounds=ROUNDS)
    http = [r["metrics"]["test_rmse"] for r in status["rounds"]]
    assert http == [h.rmse["test"] for h in ref.history]  # bit-identical: the same attributes, the same order
    assert http != [h.rmse["test"] for h in plain.history]  # and the attributes took part


def test_no_attribute_value_or_attribute_axis_crosses_a_party_boundary(
    done: tuple[Federation, dict[str, Any], list[Any], Any],
) -> None:
    fed, status, log, rows = done
    datas = party_datas(fed.datasets, include_private=True)
    n, d = status["n_users"], TINY_CONFIG["dim"]
    tokens = {len({(r.name, r.text) for r in us + it if r.text is not None}) for us, it in rows.values()}
    graph_nodes = {x.n_items + t for x in datas.values() for t in tokens}
    assert any(p.endswith("/steps/projection") for _, p, _, _ in log)
    for _, path, sent, answered in log:
        for body in (sent, answered):
            assert MARK.encode() not in body, f"an attribute value or column crossed the boundary at {path}"
        if path.endswith("/configure"):  # the catalogue size announced is the items', not items + attributes
            answer = json.loads(answered)
            assert answer["n_items"] == datas[answer["party_id"]].n_items
        if "/steps/" in path and path.rsplit("/steps/", 1)[1] == "begin":
            for name, value in unpack_tree(sent)["public"].items():
                assert not set(np.shape(value)) & (tokens | graph_nodes), f"{path}: {name} {np.shape(value)}"
                assert np.shape(value)[:1] in ((n,), (d,), (1,), (TINY_CONFIG["layers"],),
                                               (TINY_CONFIG["layers"] + 1,)), (name, np.shape(value))
