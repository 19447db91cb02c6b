"""End to end: a small synthetic federation trained in-process; federation must beat local-only."""

from __future__ import annotations

import torch

from services.data.synthetic import generate
from services.evaluation.harness import build_federation, run_protocol
from services.verfedgnn.config import TrainConfig


def test_federated_beats_local_only_on_synthetic() -> None:
    torch.set_num_threads(1)
    ds = generate(300, 200, 12_000, seed=5, latent_dim=4)
    fed = build_federation(ds, n_parties=2, seed=5)
    cfg = TrainConfig(model="gcn", dim=8, layers=2, activation="identity", optimizer="adam", lr=0.02,
                      reg=0.05, reg_bias=0.05, thd=1.0, rounds=150, patience=20, seed=5)
    federated = run_protocol(fed, protocol="federated", config=cfg)  # privacy on: projection + quantization
    local = run_protocol(fed, protocol="local", config=cfg)
    assert federated.rmse < local.rmse
    for party, row in local.per_party.items():
        assert federated.per_party[party]["rmse"] < row["rmse"], party
