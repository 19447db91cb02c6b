"""DGREC secure gradient-sharing (Zheng et al., CIKM 2023, §3.3, eqs. 5–6, Theorem 1).

Encoding, per element, after clipping g to [−δ, δ] and with z = e^β + 1:

    g* = 2·Bernoulli(p(g)) − 1,   p(g) = 1/z + (e^β − 1)(g + δ) / (2zδ)  ∈ [1/z, e^β/z].

Decoding: ḡ = δ·z/(e^β − 1) · g* (or the mean of several received codes); E[ḡ] = clip(g, δ),
so the mechanism is unbiased (DGREC Proposition 1), though each decoded element has
variance (δz/(e^β−1))² − g².

Privacy assumption: every element is an independent randomized response whose two output
probabilities differ by at most a factor e^β over the whole clipping range, so one element
is β-LDP and a gradient of n_s elements is (n_s·β)-LDP for arbitrary neighbouring inputs.
``rdp_epsilon`` gives the exact Rényi-DP of that randomized response; ``rdp_epsilon_paper``
reproduces the paper's Theorem 1 bound for comparison (see its docstring).
"""

from __future__ import annotations

import math

import numpy as np


def _check(delta: float, strength: float) -> None:
    if not (delta > 0 and math.isfinite(delta)):
        raise ValueError("delta must be positive and finite")
    if not (strength > 0 and math.isfinite(strength)):
        raise ValueError("strength (β) must be positive and finite")


def encode_1bit(x: np.ndarray, *, delta: float, strength: float, rng: np.random.Generator) -> np.ndarray:
    """Encode each element as ±1 (DGREC eq. 5).

    Args:
        x: gradient, any shape, finite.
        delta: clipping threshold δ (the paper uses 0.1).
        strength: perturbation strength β (the paper uses 1); larger β = less noise, less privacy.
        rng: source of the Bernoulli draws.

    Returns:
        int8 array of x's shape with values in {−1, +1}.
    """
    _check(delta, strength)
    g = np.clip(np.asarray(x, dtype=np.float64), -delta, delta)
    if not np.all(np.isfinite(g)):
        raise ValueError("x contains non-finite values")
    z = math.exp(strength) + 1.0
    p = 1.0 / z + (z - 2.0) * (g + delta) / (2.0 * z * delta)
    return np.where(rng.random(g.shape) < p, np.int8(1), np.int8(-1)).astype(np.int8)


def decode_1bit(
    bits: np.ndarray, *, delta: float, strength: float, axis: int | None = None
) -> np.ndarray:
    """Unbiased estimate of the clipped gradient from ±1 codes (DGREC eq. 6).

    Args:
        bits: codes from :func:`encode_1bit`; values must be ±1.
        delta: the encoder's δ.
        strength: the encoder's β.
        axis: if given, average codes over this axis first (several received copies).

    Returns:
        float32 array δ(e^β+1)/(e^β−1) · mean(bits).
    """
    _check(delta, strength)
    b = np.asarray(bits)
    if not np.all(np.abs(b) == 1):
        raise ValueError("codes must be ±1")
    mean = b.mean(axis=axis, dtype=np.float64) if axis is not None else b.astype(np.float64)
    z = math.exp(strength) + 1.0
    return (delta * z / (z - 2.0) * mean).astype(np.float32)


def rdp_epsilon(*, strength: float, size: int, alpha: float = 1.5) -> float:
    """Exact (α, ε)-RDP of the encoder for worst-case neighbouring gradients.

    One element is binary randomized response with p = e^β/(e^β+1) against 1 − p:
    ε₁ = log(p^α (1−p)^{1−α} + (1−p)^α p^{1−α}) / (α − 1); elements compose additively.

    Args:
        strength: β.
        size: number of elements n_s that may all differ between neighbours.
        alpha: Rényi order α > 1.
    """
    if not alpha > 1:
        raise ValueError("alpha must exceed 1")
    _check(1.0, strength)
    log_p = -math.log1p(math.exp(-strength))  # log(e^β/(e^β+1))
    log_q = -math.log1p(math.exp(strength))
    terms = np.logaddexp(alpha * log_p + (1 - alpha) * log_q, alpha * log_q + (1 - alpha) * log_p)
    return float(size * terms / (alpha - 1))


def rdp_epsilon_paper(*, delta: float, strength: float, size: int) -> float:
    """DGREC Theorem 1: ε = 2 n_s log(1.5πδ(e^β+1)/(2(e^β−1)) + (e^{−β/2}+e^{3β/2})/(e^β+1)), α = 1.5.

    Natural logarithm.  Note: the paper quotes (1.5, 0.54)-RDP for δ = 0.1, β = 1, which is
    this expression with n_s = 1 and a base-10 logarithm; with the natural log it is 1.26.
    The second term alone equals the exact randomized-response RDP (:func:`rdp_epsilon`),
    so the paper's bound is looser than, never below, the exact value.
    """
    _check(delta, strength)
    eb = math.exp(strength)
    inner = 1.5 * math.pi * delta * (eb + 1) / (2 * (eb - 1)) + (math.exp(-0.5 * strength)
                                                                  + math.exp(1.5 * strength)) / (eb + 1)
    return 2.0 * size * math.log(inner)


def rdp_to_dp(*, rdp_eps: float, alpha: float, target_delta: float) -> float:
    """Convert (α, ε)-RDP to (ε', δ)-DP: ε' = ε + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3)."""
    if not (0 < target_delta < 1) or not alpha > 1:
        raise ValueError("need 0 < target_delta < 1 and alpha > 1")
    return rdp_eps + math.log(1.0 / target_delta) / (alpha - 1)
