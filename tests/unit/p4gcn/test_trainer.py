"""The P4GCN trainer of the rating party: a short social-gnn training run, early stopping, weight EMA."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import scipy.sparse as sp
import torch

from models.p4gcn import P4GCNConfig
from services.p4gcn.backends import plain_backend
from services.p4gcn.trainer import SocialData, SocialTrainConfig, SocialTrainer, Triples


def _synthetic(seed: int = 0, n_users: int = 60, n_items: int = 40) -> SocialData:
    """Users in two communities; ratings depend on community x item group; links inside communities."""
    rng = np.random.default_rng(seed)
    group = np.arange(n_users) % 2
    pairs = np.array([(u, v) for u in range(n_users) for v in rng.choice(n_items, 8, replace=False)])
    ratings = np.where(group[pairs[:, 0]] == pairs[:, 1] % 2, 3.5, 1.0).astype(np.float32)
    ratings += rng.normal(0, 0.2, ratings.size).astype(np.float32)
    order = rng.permutation(len(pairs))
    cut = [int(0.8 * len(order)), int(0.9 * len(order))]
    parts = np.split(order, cut)
    tri = [Triples(pairs[p, 0], pairs[p, 1], np.clip(ratings[p], 0.5, 4.0)) for p in parts]
    src = rng.integers(0, n_users, 120)
    dst = (src + 2 * rng.integers(1, 5, 120)) % n_users  # same parity = same community
    adj = sp.csr_matrix((np.ones(240), (np.r_[src, dst], np.r_[dst, src])), shape=(n_users, n_users))
    adj.data[:] = 1.0
    return SocialData(np.array([str(u) for u in range(n_users)]), n_items, tri[0], tri[1], tri[2], adj, 0.5, 4.0)


def test_short_training_run_improves_loss() -> None:
    data = _synthetic()
    cfg = SocialTrainConfig(epochs=4, user_batch=16, lr=0.01, patience=10, backward_weight=0.5)
    backend = plain_backend(data.adjacency, epsilon=15.0, delta=1e-4, dp_enabled=True, epochs=cfg.epochs,
                            clip_norm=1.0, seed=0, dim=16)
    trainer = SocialTrainer(data, model_config=P4GCNConfig(dim=16), config=cfg, backend=backend)
    losses = [trainer.run_epoch() for _ in range(4)]
    assert losses[-1] < losses[0]
    record = backend.privacy()
    assert record["epochs"] == 4 and record["epsilon_spent"] <= 15.0
    assert backend.traffic()["bytes_to_social"] > 0


def test_fit_reports_test_metrics_without_social_party() -> None:
    data = _synthetic(1)
    cfg = SocialTrainConfig(epochs=3, user_batch=20, lr=0.01)
    result = SocialTrainer(data, model_config=P4GCNConfig(dim=8, fusion=False, beta=0.0), config=cfg,
                           backend=None).fit()
    assert 0.0 < result.rmse < 3.5 and result.epochs_run == 3 and len(result.valid_history) == 3


def test_weight_ema_is_evaluated_and_kept_while_live_weights_train() -> None:
    data = _synthetic(1)
    cfg = SocialTrainConfig(epochs=2, user_batch=20, lr=0.01, ema_decay=0.9)
    trainer = SocialTrainer(data, model_config=P4GCNConfig(dim=8, fusion=False, beta=0.0), config=cfg, backend=None)
    trainer.run_epoch()
    live = trainer.model.gcn.user_emb.detach().clone()
    ema = trainer._ema["gcn.user_emb"].clone()
    assert not torch.allclose(live, ema)
    trainer._evaluate_averaged(data.valid, None)
    assert torch.equal(trainer.model.gcn.user_emb.detach(), live)  # live weights restored after evaluation
    result = trainer.fit()
    assert 0.0 < result.rmse < 3.5
    with pytest.raises(pydantic.ValidationError):
        SocialTrainConfig(ema_decay=1.0)
