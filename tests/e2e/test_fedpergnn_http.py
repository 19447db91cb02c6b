"""FedPerGNN, the second protocol, over HTTP between live party services through the same engine as VerFedGNN."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.crypto.secagg import SecAggParty
from services.federation import registry
from services.federation.inprocess import InProcessRun
from services.federation.plan import Seeds
from services.verfedgnn.reference import party_datas
from services.verfedgnn.secure import dev_party_secret
from tests.support.federation import TINY_CONFIG, federation

ROUNDS, SEED = 3, 4


def test_fedpergnn_over_http_equals_the_in_process_run(tmp_path: Path) -> None:
    config = {"protocol": "fedpergnn", "train": TINY_CONFIG, "n_pseudo": 5}
    with federation(tmp_path, n_parties=2) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=config)
        status = fed.client.wait(run["run_id"], timeout=180)
        datasets = fed.datasets
    assert status["state"] == "completed", status["detail"]
    assert status["privacy"]["graph_expansion"]["enabled"] is True  # the run's record is FedPerGNN's
    plan = registry.plan("fedpergnn")
    datas = party_datas(datasets)
    sec = {p: SecAggParty(party_id=p, secret=dev_party_secret(p), run_id="reference") for p in datas}
    reference = InProcessRun(plan=plan, config=plan.config(config, seed=SEED, rounds=ROUNDS), datas=datas,
                             seeds={p: Seeds(0, s.derived_seed("local", SEED)) for p, s in sec.items()}, secagg=sec)
    expected = [reference.run_round(t).rmse["test"] for t in range(ROUNDS)]
    got = [r["metrics"]["test_rmse"] for r in status["rounds"]]
    assert got == pytest.approx(expected, abs=5e-5)
