"""Slices of the social experiment and the once design end to end on a small synthetic social data set."""

from __future__ import annotations

import numpy as np

from models.p4gcn import P4GCNConfig
from services.evaluation.social import ONCE_VARIANTS, SLICES, run_once, slice_masks, slice_metrics
from services.p4gcn.trainer import SocialTrainConfig
from tests.unit.p4gcn.test_trainer import _synthetic


def test_slice_masks_follow_training_counts_and_links() -> None:
    data = _synthetic()
    masks = slice_masks(data, data.test, cold_max=5)
    counts = np.bincount(data.train.users, minlength=data.n_users)
    degree = np.asarray(data.adjacency.getnnz(axis=1))
    for k, u in enumerate(data.test.users):
        assert masks["cold_start"][k] == (counts[u] <= 5)
        assert masks["with_links"][k] == (degree[u] > 0) != masks["without_links"][k]
    perfect = slice_metrics(data.test.ratings.astype(float), data.test, masks)
    assert perfect["all"]["rmse"] == 0.0 and perfect["all"]["n"] == len(data.test.users)
    off = slice_metrics(data.test.ratings + 0.5, data.test, masks)
    assert abs(off["with_links"]["rmse"] - 0.5) < 1e-6 and abs(off["all"]["mae"] - 0.5) < 1e-6


def test_once_design_reports_every_variant_per_slice_within_budget() -> None:
    data = _synthetic(2)
    out = run_once(data, model_config=P4GCNConfig(dim=8, biases=True),
                   config=SocialTrainConfig(epochs=3, user_batch=20, lr=0.01, seed=2), epsilon=5.0, delta=1e-4)
    assert tuple(out) == ONCE_VARIANTS
    for r in out.values():
        assert set(r.slices) == set(SLICES) and 0.0 < r.slices["all"]["rmse"] < 3.5
        assert r.test_pred.min() >= data.rating_min and r.test_pred.max() <= data.rating_max
    dp_record = out["p4gcn_dp"].record
    assert dp_record["privacy"]["epsilon_spent"] <= 5.0 and dp_record["privacy"]["charged_units"] == 1
    assert "social_weight" in dp_record and out["p4gcn_nodp"].record["privacy"]["dp_enabled"] is False
