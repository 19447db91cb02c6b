"""FedPerGNN local differential privacy: clip, then add Laplace noise; pseudo rows (Wu et al. 2022).

    g̃ = clip(g, δ) + Laplace(0, λ),   element-wise clip to [−δ, δ]  (L∞ clipping)

FedPerGNN uses δ = 0.1 and λ = 0.2.

Privacy assumption: the clipped value of one element moves by at most 2δ between any two
inputs, so each released element is ε-LDP with ε = 2δ/λ (= 1 at the paper's settings); a
vector of d elements that may all change is (d·ε)-LDP, and repeated releases compose.
"""

from __future__ import annotations

import math

import numpy as np


def ldp_perturb(
    x: np.ndarray, *, clip: float = 0.1, scale: float = 0.2, rng: np.random.Generator
) -> np.ndarray:
    """Clip each element to [−clip, clip], then add i.i.d. Laplace(0, scale) noise.

    Args:
        x: gradient, any shape, finite.
        clip: threshold δ.
        scale: Laplace scale λ (the paper's "strength of Laplacian noise").
        rng: noise source.

    Returns:
        float32 array of x's shape; E[result] = clip(x, δ), per-element variance 2λ².
    """
    if not (clip > 0 and math.isfinite(clip)) or not (scale > 0 and math.isfinite(scale)):
        raise ValueError("clip and scale must be positive and finite")
    g = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(g)):
        raise ValueError("x contains non-finite values")
    noisy = np.clip(g, -clip, clip) + rng.laplace(0.0, scale, size=g.shape)
    return noisy.astype(np.float32)


def ldp_epsilon(*, clip: float = 0.1, scale: float = 0.2, size: int = 1) -> float:
    """Pure-LDP ε of one release of ``size`` elements: size · 2δ/λ."""
    if not (clip > 0 and scale > 0) or size < 0:
        raise ValueError("clip and scale must be positive, size non-negative")
    return size * 2.0 * clip / scale


def pseudo_rows(real: np.ndarray, n: int, *, rng: np.random.Generator) -> np.ndarray:
    """`n` fake gradient rows drawn from a Gaussian with the mean and covariance of the real rows.

    FedPerGNN's pseudo-interacted items: rows nobody interacted with are uploaded too, with
    gradients that look like the real ones, so the set of uploaded rows does not reveal which
    entities were interacted with. Both kinds then go through the same `ldp_perturb`.

    Args:
        real: (R, D) real gradient rows (R ≥ 1), before clipping.
        n: number of pseudo rows.
        rng: noise source.

    Returns:
        float32 array (n, D).
    """
    x = np.asarray(real, dtype=np.float64).reshape(real.shape[0], -1)
    if n <= 0:
        return np.zeros((0, x.shape[1]), dtype=np.float32)
    if x.shape[0] == 0:
        raise ValueError("pseudo rows need at least one real row to imitate")
    cov = np.cov(x, rowvar=False) if x.shape[0] > 1 else np.zeros((x.shape[1], x.shape[1]))
    out = rng.multivariate_normal(x.mean(axis=0), np.atleast_2d(cov), size=n, method="eigh")
    return out.reshape((n,) + real.shape[1:]).astype(np.float32)
