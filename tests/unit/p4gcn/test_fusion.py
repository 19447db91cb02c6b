"""The once-released social summary and the validated fusion: one charged release, a weight that cannot hurt."""

from __future__ import annotations

import numpy as np
import pytest

from models.p4gcn import P4GCNConfig
from services.crypto import dp
from services.errors import ProtocolError
from services.p4gcn.backends import plain_backend
from services.p4gcn.fusion import (
    FusionConfig,
    fit_fusion,
    fused_predictions,
    local_features,
    release_once,
    user_summary,
)
from services.p4gcn.trainer import SocialTrainConfig, SocialTrainer
from tests.unit.p4gcn.test_trainer import _synthetic


def test_summary_is_released_once_under_the_whole_budget() -> None:
    data = _synthetic()
    trainer = SocialTrainer(data, model_config=P4GCNConfig(dim=8, fusion=False, beta=0.0, biases=True),
                            config=SocialTrainConfig(epochs=2, user_batch=20, lr=0.01), backend=None)
    trainer.fit()
    x = user_summary(trainer.model, data, 4)
    assert x.shape == (data.n_users, 4) and np.linalg.norm(x, axis=1).max() <= 1.0 + 1e-9
    unrated = np.bincount(data.train.users, minlength=data.n_users) == 0
    assert np.all(x[unrated] == 0.0)
    backend = plain_backend(data.adjacency, epsilon=10.0, delta=1e-4, dp_enabled=True, epochs=1, clip_norm=1.0,
                            seed=0, dim=4, backward=False)
    y = release_once(backend, x, batch=16)  # 4 batches partition the users: charged as one release
    record = backend.privacy()
    assert record["charged_units"] == 1 and record["releases_per_unit"] == 1 and record["batches"] == 4
    assert record["epsilon_spent"] <= 10.0
    assert record["sigma"] == pytest.approx(dp.calibrate_sigma(10.0, 1e-4, 1) * dp.sensitivity(1.0))
    assert y.shape == x.shape and not np.allclose(y, 0.0)
    with pytest.raises(ProtocolError):  # a second product for a user of the same epoch is refused
        backend.forward(np.array([0]))


def test_fusion_keeps_social_signal_only_when_held_out_ratings_say_it_helps() -> None:
    rng = np.random.default_rng(0)
    n, users = 3000, rng.integers(0, 600, 3000)
    counts = rng.integers(0, 12, 600)
    local = local_features(counts, 5)[users]
    social = rng.normal(size=(n, 12))
    noise = rng.normal(0, 0.8, n)
    cfg = FusionConfig()
    useless = fit_fusion(0.1 * local[:, 1] + noise, local, social, users, cfg)  # social independent of residual
    assert useless.weight == 0.0
    np.testing.assert_allclose(fused_predictions(useless, np.zeros(n), local, social),
                               fused_predictions(useless, np.zeros(n), local, None))
    coef = rng.normal(0, 0.3, 12)
    useful = fit_fusion(social @ coef + noise, local, social, users, cfg)
    assert useful.weight > 0.0 and useful.record()["social_weight"] == useful.weight
    fresh = rng.normal(size=(n, 12))  # held-out ratings: the fitted head must predict their residuals
    held = fresh @ coef + rng.normal(0, 0.8, n)
    err_fused = np.mean((held - fused_predictions(useful, np.zeros(n), local, fresh)) ** 2)
    err_local = np.mean((held - fused_predictions(useless, np.zeros(n), local, None)) ** 2)
    assert err_fused < err_local - 0.05
