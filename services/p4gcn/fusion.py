"""A social summary released once under the whole budget, and the rating party's validated fusion.

Budget (issue 15): per-epoch products compose (2 Gaussian releases per epoch), so σ grows with the
number of epochs. Here the rating party first trains its own model alone, then sends one summary X
(n × k: its users' bias and top principal components, rows clipped to C; zero rows for users without
ratings) and asks for a single epoch of forward sandwich products Y = L_sym X W_P2 + Z over user
batches that partition the users: one release, charged once by the SocialParty's accountant, which
gets the whole (ε, δ). Everything after it (fitting, evaluation, serving) is post-processing.

Fusion that cannot hurt: on its own validation ratings the rating party fits a ridge regression of
the base model's residuals, first on local features of the user (intercept, cold start, 1/(1 + n_u),
no ratings; kept only if it passes the same cross-validated test), then on social features (Y_u,
Y_u gated by 1/(1 + n_u) and by "no ratings", and Y_u ⊗ the item's principal components). The social part enters with a weight w chosen with the ridge
penalty by grouped (by user) cross-validation on the validation ratings; w > 0 only if the
cross-validated gain over w = 0 exceeds one standard error, so the rating party keeps the social
signal only where held-out ratings say it helps beyond noise; w is in the run record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from models.p4gcn import P4GCN
from services.crypto.dp import clip_rows
from services.p4gcn.backends import SocialProductBackend
from services.p4gcn.trainer import SocialData, Triples


class FusionConfig(BaseModel):
    """Summary size, cold-start threshold and the validation grid of the fusion (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary_dim: int = Field(8, ge=2, le=64)
    cold_max: int = Field(5, ge=0)
    folds: int = Field(5, ge=2)
    alphas: tuple[float, ...] = (1.0, 10.0, 100.0, 1000.0)
    weights: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    release_batch: int = Field(4096, ge=1)
    seed: int = 0


def _pca(x: np.ndarray, k: int, rows: np.ndarray) -> np.ndarray:
    """x projected on its top-k principal directions (fitted on `rows`), standardised."""
    centre = x[rows].mean(axis=0)
    _, _, vt = np.linalg.svd(x[rows] - centre, full_matrices=False)
    z = (x - centre) @ vt[:k].T
    return z / np.maximum(z[rows].std(axis=0), 1e-12)


def user_summary(model: P4GCN, data: SocialData, k: int, clip_norm: float = 1.0) -> np.ndarray:
    """X: per user [bias, top k-1 principal components of x_u^(1)], scaled and clipped to C; 0 if unrated."""
    counts = np.bincount(data.train.users, minlength=data.n_users)
    rated = np.flatnonzero(counts > 0)
    with torch.no_grad():
        xu, _ = model.gcn()
        bias = model.user_bias.detach().numpy().astype(np.float64)[:, None]
    cols = np.hstack([(bias - bias[rated].mean()) / max(float(bias[rated].std()), 1e-12),
                      _pca(xu.numpy().astype(np.float64), k - 1, rated)])
    cols[counts == 0] = 0.0
    # A typical row at norm C/2: few rows are clipped, and the noise is added at the scale of C.
    scale = 0.5 * clip_norm / max(float(np.median(np.linalg.norm(cols[rated], axis=1))), 1e-12)
    return clip_rows(scale * cols, clip_norm)


def item_components(model: P4GCN, data: SocialData, k: int) -> np.ndarray:
    """z_v: the top-k principal components of the items' x_v^(1) (standardised over rated items)."""
    with torch.no_grad():
        _, xv = model.gcn()
    rated = np.flatnonzero(np.bincount(data.train.items, minlength=data.n_items) > 0)
    return _pca(xv.numpy().astype(np.float64), k, rated)


def release_once(backend: SocialProductBackend, x: np.ndarray, batch: int) -> np.ndarray:
    """One epoch of forward products over batches partitioning all users: Y = L_sym X W_P2 + Z."""
    backend.begin_epoch(x)
    n = x.shape[0]
    y = np.zeros((n, x.shape[1]))
    for ub in np.array_split(np.arange(n), max(1, -(-n // batch))):
        y[ub] = backend.forward(ub)
    return y


def local_features(counts: np.ndarray, cold_max: int) -> np.ndarray:
    """Rating-party features of each user: [1, cold start, 1/(1 + n_u), no ratings]."""
    n = counts.astype(np.float64)
    return np.stack([np.ones_like(n), (n <= cold_max).astype(float), 1.0 / (1.0 + n), (n == 0).astype(float)], 1)


def social_features(y: np.ndarray, counts: np.ndarray, item_pcs: np.ndarray, t: Triples) -> np.ndarray:
    """Per rating: [Y_u, Y_u / (1 + n_u), Y_u·[n_u = 0], Y_u ⊗ z_v] (z_v: the item's principal components)."""
    yu = y[t.users]
    n = counts[t.users].astype(np.float64)[:, None]
    inter = (yu[:, :, None] * item_pcs[t.items][:, None, :]).reshape(len(t.users), -1)
    return np.hstack([yu, yu / (1.0 + n), yu * (n == 0), inter])


def _ridge(f: np.ndarray, r: np.ndarray, alpha: float) -> np.ndarray:
    return np.linalg.solve(f.T @ f + alpha * np.eye(f.shape[1]), f.T @ r)


@dataclass
class Fusion:
    """base + local head (+ weight × social head), fitted on validation residuals."""

    local: np.ndarray
    social: np.ndarray | None = None
    weight: float = 0.0
    alpha: float = 0.0
    cv_mse: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The fusion's choices for the run record."""
        return {"social_weight": self.weight, "ridge_alpha": self.alpha, "local_head": bool(np.any(self.local)),
                "cv_mse": {k: round(v, 6) for k, v in self.cv_mse.items()}}


def _clustered_se(gain: np.ndarray, users: np.ndarray) -> float:
    """Standard error of the mean per-rating gain, clustered by user (a user's ratings are not independent)."""
    _, inv = np.unique(users, return_inverse=True)
    per_user = np.bincount(inv, weights=gain)
    return float(np.sqrt(per_user.size * per_user.var()) / gain.size)


def _cv(f: np.ndarray, r: np.ndarray, folds: np.ndarray, alpha: float) -> np.ndarray:
    """Held-out ridge predictions: each fold predicted by the fit on the other folds."""
    out = np.zeros_like(r)
    for k in np.unique(folds):
        held = folds == k
        out[held] = f[held] @ _ridge(f[~held], r[~held], alpha)
    return out


def fit_fusion(resid: np.ndarray, local: np.ndarray, social: np.ndarray | None, users: np.ndarray,
               config: FusionConfig) -> Fusion:
    """Fit the local head, then pick (alpha, w) for the social head by grouped CV (w = 0: local only).

    Each head is kept only if its cross-validated gain (folds grouped by user) exceeds one
    user-clustered standard error: a gain inside the noise of the validation ratings is not taken.
    The local head is the same for every variant, so it never separates them.
    """
    folds = np.random.default_rng([config.seed, 3]).integers(0, config.folds, users.max() + 1)[users]
    local_gain = resid**2 - (resid - _cv(local, resid, folds, 1e-3)) ** 2
    keep_local = local_gain.mean() > _clustered_se(local_gain, users)
    beta = _ridge(local, resid, 1e-3) if keep_local else np.zeros(local.shape[1])
    if social is None:
        return Fusion(beta)
    r2 = resid - local @ beta
    cv: dict[str, float] = {"w=0": float(np.mean(r2**2))}
    best = (0.0, 0.0, 0.0, 0.0)  # (gain, se, w, alpha)
    for alpha in config.alphas:
        out = _cv(social, r2, folds, alpha)
        for w in (w for w in config.weights if w > 0):
            gain = r2**2 - (r2 - w * out) ** 2
            cv[f"alpha={alpha:g},w={w:g}"] = cv["w=0"] - float(gain.mean())
            if gain.mean() > best[0]:
                best = (float(gain.mean()), _clustered_se(gain, users), w, alpha)
    gain, se, w, alpha = best
    cv["best_gain"], cv["best_gain_se"] = gain, se
    if gain <= se:
        return Fusion(beta, np.zeros(social.shape[1]), 0.0, alpha, cv)
    return Fusion(beta, _ridge(social, r2, alpha), w, alpha, cv)


def fused_predictions(fusion: Fusion, base: np.ndarray, local: np.ndarray, social: np.ndarray | None) -> np.ndarray:
    """base + local head + w · social head."""
    out = base + local @ fusion.local
    if social is not None and fusion.social is not None and fusion.weight > 0:
        out = out + fusion.weight * (social @ fusion.social)
    return out
