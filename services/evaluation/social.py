"""Experiment runners of protocol `social-gnn` (P4GCN, paper §4.3): variants, slices and data-set presets.

Two designs of spending the social party's budget are run here:
  per-epoch (`run_variant`, the paper's): every epoch's forward and backward products compose;
  once (`run_once`, issue 15): the rating party trains alone, the social party releases one summary
  product under the whole budget (services.p4gcn.fusion), and a validated fusion adds it.
Every variant is scored on slices of the test ratings: all, cold start (the user has <= 5 training
ratings), users with and without social links.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from models.metrics import error_sums, rmse_mae
from models.p4gcn import P4GCNConfig
from services.p4gcn.backends import SocialProductBackend, plain_backend
from services.p4gcn.fusion import (
    FusionConfig,
    fit_fusion,
    fused_predictions,
    item_components,
    local_features,
    release_once,
    social_features,
    user_summary,
)
from services.p4gcn.trainer import (
    SocialData,
    SocialRunResult,
    SocialTrainConfig,
    SocialTrainer,
    Triples,
)

SLICES = ("all", "cold_start", "with_links", "without_links")
COLD_MAX = 5


def slice_masks(data: SocialData, t: Triples, cold_max: int = COLD_MAX) -> dict[str, np.ndarray]:
    """Boolean masks over the ratings of `t`: all, cold start (<= cold_max training ratings), with/without links."""
    counts = np.bincount(data.train.users, minlength=data.n_users)[t.users]
    linked = (np.asarray(data.adjacency.getnnz(axis=1)) > 0)[t.users]
    return {"all": np.ones(len(t.users), dtype=bool), "cold_start": counts <= cold_max,
            "with_links": linked, "without_links": ~linked}


def slice_metrics(pred: np.ndarray, t: Triples, masks: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """RMSE, MAE and rating count of each slice."""
    out = {}
    for name, m in masks.items():
        rmse, mae = rmse_mae(*error_sums(pred[m], t.ratings[m])) if m.any() else (float("nan"), float("nan"))
        out[name] = {"rmse": rmse, "mae": mae, "n": int(m.sum())}
    return out


def run_variant(data: SocialData, *, variant: str, model_config: P4GCNConfig, config: SocialTrainConfig,
                epsilon: float = 15.0, delta: float = 1e-4) -> SocialRunResult:
    """Per-epoch design. variant: "dp" (P4GCN, aMGM noise), "nodp" (P4GCN*, no noise), "dp-forward" (DP,
    forward products only: X trained locally, half the releases), "dp-nolinks" (control: DP with an empty
    social graph), "lightgcn" (no social party) or "fusion-only" (P4GCN's fusion layer with x^(2) = 0)."""
    backend: SocialProductBackend | None
    if variant == "lightgcn":
        backend = None
        mcfg = model_config.model_copy(update={"fusion": False, "beta": 0.0})
    elif variant == "fusion-only":
        backend, mcfg = None, model_config
    elif variant in ("dp", "nodp", "dp-forward", "dp-nolinks"):
        forward_only = variant == "dp-forward"
        if variant == "dp-nolinks":  # control: same mechanism and noise, social graph emptied (L_sym = I)
            data = dataclasses.replace(data, adjacency=sp.csr_matrix(data.adjacency.shape))
        backend = plain_backend(data.adjacency, epsilon=epsilon, delta=delta, dp_enabled=variant != "nodp",
                                epochs=config.epochs, clip_norm=config.clip_norm, seed=config.seed,
                                dim=model_config.dim, backward=not forward_only)
        mcfg = model_config
        if forward_only:
            config = config.model_copy(update={"backward_weight": 0.0})
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return SocialTrainer(data, model_config=mcfg, config=config, backend=backend).fit()


@dataclass
class VariantResult:
    """Test predictions of one variant, its slices and its run record (privacy, fusion weight)."""

    test_pred: np.ndarray
    slices: dict[str, dict[str, float]]
    record: dict[str, Any] = field(default_factory=dict)


ONCE_VARIANTS = ("lightgcn", "p4gcn_nodp", "p4gcn_dp", "p4gcn_dp_nolinks")


def run_once(data: SocialData, *, model_config: P4GCNConfig, config: SocialTrainConfig, epsilon: float,
             delta: float, fusion: FusionConfig | None = None,
             variants: tuple[str, ...] = ONCE_VARIANTS) -> dict[str, VariantResult]:
    """Once design: LightGCN alone (+ the local head), then per social variant one release and the fusion.

    "lightgcn": the rating party alone (LightGCN + decoder, then the same local validation head as the
    others); "p4gcn_nodp": summary product without noise; "p4gcn_dp": one (ε, δ) release;
    "p4gcn_dp_nolinks": control, the same release over an empty graph (L_sym = I).
    """
    fcfg = fusion or FusionConfig(seed=config.seed)
    trainer = SocialTrainer(data, model_config=model_config.model_copy(update={"fusion": False, "beta": 0.0}),
                            config=config, backend=None)
    base = trainer.fit()
    counts = np.bincount(data.train.users, minlength=data.n_users)
    lv, lt = (local_features(counts, fcfg.cold_max)[t.users] for t in (data.valid, data.test))
    resid = data.valid.ratings.astype(np.float64) - base.valid_pred
    masks = slice_masks(data, data.test, fcfg.cold_max)
    clip = (data.rating_min, data.rating_max)
    head = fit_fusion(resid, lv, None, data.valid.users, fcfg)
    pred = np.clip(fused_predictions(head, base.test_pred, lt, None), *clip)
    out = {"lightgcn": VariantResult(pred, slice_metrics(pred, data.test, masks),
                                     {"raw": slice_metrics(base.test_pred, data.test, masks)["all"],
                                      "best_epoch": base.best_epoch})}
    x = user_summary(trainer.model, data, fcfg.summary_dim, config.clip_norm)
    z = item_components(trainer.model, data, fcfg.summary_dim)
    for variant in (v for v in variants if v != "lightgcn"):
        adjacency = sp.csr_matrix(data.adjacency.shape) if variant.endswith("nolinks") else data.adjacency
        backend = plain_backend(adjacency, epsilon=epsilon, delta=delta, dp_enabled=variant != "p4gcn_nodp",
                                epochs=1, clip_norm=config.clip_norm, seed=config.seed, dim=fcfg.summary_dim,
                                backward=False)
        y = release_once(backend, x, fcfg.release_batch)
        sv, st = (social_features(y, counts, z, t) for t in (data.valid, data.test))
        head = fit_fusion(resid, lv, sv, data.valid.users, fcfg)
        pred = np.clip(fused_predictions(head, base.test_pred, lt, st), *clip)
        record = {**head.record(), "privacy": backend.privacy()}
        out[variant] = VariantResult(pred, slice_metrics(pred, data.test, masks), record)
    return out


# Settings tuned on validation RMSE (FilmTrust: seeds 0-1, LightGCN alone) and used by the benchmark and the CLI.
FILMTRUST_MODEL = P4GCNConfig(layers=3, dropout=0.2, biases=True)


def filmtrust_train_config(*, seed: int, epochs: int = 30, ema_decay: float = 0.97) -> SocialTrainConfig:
    """Schedule of the FilmTrust runs (user batches of 64, Adam 2e-3, weight decay 3e-4, weight EMA 0.97)."""
    return SocialTrainConfig(epochs=epochs, user_batch=64, lr=2e-3, weight_decay=3e-4, backward_weight=0.1,
                             ema_decay=ema_decay, seed=seed)


def train_config_for(name: str, *, seed: int, epochs: int = 30, ema_decay: float = 0.97) -> SocialTrainConfig:
    """The schedule of a social data set: FilmTrust's, with user batches of 512 for larger data sets (CiaoDVD)."""
    cfg = filmtrust_train_config(seed=seed, epochs=epochs, ema_decay=ema_decay)
    return cfg if name == "filmtrust" else cfg.model_copy(update={"user_batch": 512})
