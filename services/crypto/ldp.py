"""FedPerGNN local differential privacy: clip, then add Laplace noise (Wu et al. 2022).

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
