"""Experiment runners of protocol `social-gnn` (P4GCN, paper §4.3): the variants and the FilmTrust settings.

The trainer itself is services.p4gcn.trainer; this module only picks the backend and model of each
variant and holds the tuned FilmTrust configuration used by the benchmark and the CLI.
"""

from __future__ import annotations

import dataclasses

import scipy.sparse as sp

from models.p4gcn import P4GCNConfig
from services.p4gcn.backends import SocialProductBackend, plain_backend
from services.p4gcn.trainer import SocialData, SocialRunResult, SocialTrainConfig, SocialTrainer


def run_variant(data: SocialData, *, variant: str, model_config: P4GCNConfig, config: SocialTrainConfig,
                epsilon: float = 15.0, delta: float = 1e-4) -> SocialRunResult:
    """variant: "dp" (P4GCN, aMGM noise), "nodp" (P4GCN*, no noise), "dp-forward" (DP, forward products
    only: X trained locally, half the releases), "dp-nolinks" (control: DP with an empty social
    graph), "lightgcn" (no social party) or "fusion-only" (P4GCN's fusion layer with x^(2) = 0)."""
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


# Settings tuned on validation RMSE (seeds 0-1, LightGCN alone) and used by the benchmark and the CLI.
FILMTRUST_MODEL = P4GCNConfig(layers=3, dropout=0.2, biases=True)


def filmtrust_train_config(*, seed: int, epochs: int = 30, ema_decay: float = 0.97) -> SocialTrainConfig:
    """Schedule of the FilmTrust runs (user batches of 64, Adam 2e-3, weight decay 3e-4, weight EMA 0.97)."""
    return SocialTrainConfig(epochs=epochs, user_batch=64, lr=2e-3, weight_decay=3e-4, backward_weight=0.1,
                             ema_decay=ema_decay, seed=seed)
