"""DGREC secure gradient-sharing: codes, unbiased decoding, RDP figures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.crypto.gradient_sharing import (
    decode_1bit,
    encode_1bit,
    rdp_epsilon,
    rdp_epsilon_paper,
    rdp_to_dp,
)

DELTA, BETA = 0.1, 1.0
SCALE = DELTA * (math.e + 1) / (math.e - 1)  # ≈ 0.216: |decoded| per code


def test_codes_are_plus_minus_one() -> None:
    bits = encode_1bit(np.linspace(-1, 1, 101), delta=DELTA, strength=BETA, rng=np.random.default_rng(0))
    assert bits.dtype == np.int8 and set(np.unique(bits).tolist()) <= {-1, 1}
    assert bits.shape == (101,)


def test_decoding_is_unbiased_for_clipped_value() -> None:
    """5000 codes per element: decoded mean = clip(g, δ) (std of mean ≤ 0.0031, tol 0.015)."""
    g = np.array([-0.3, -0.1, -0.05, 0.0, 0.02, 0.07, 0.1, 0.4])
    bits = encode_1bit(np.tile(g, (5000, 1)), delta=DELTA, strength=BETA, rng=np.random.default_rng(3))
    est = decode_1bit(bits, delta=DELTA, strength=BETA, axis=0)
    np.testing.assert_allclose(est, np.clip(g, -DELTA, DELTA), atol=0.015)


def test_decode_elementwise_scale_and_validation() -> None:
    out = decode_1bit(np.array([1, -1], dtype=np.int8), delta=DELTA, strength=BETA)
    np.testing.assert_allclose(out, [SCALE, -SCALE], rtol=1e-6)
    with pytest.raises(ValueError):
        decode_1bit(np.array([0, 1]), delta=DELTA, strength=BETA)
    with pytest.raises(ValueError):
        encode_1bit(np.zeros(2), delta=0.0, strength=BETA, rng=np.random.default_rng(0))


def test_extreme_probabilities_bound_the_likelihood_ratio() -> None:
    """P(+1) is 1/(e^β+1) at −δ and e^β/(e^β+1) at +δ: ratio e^β (β-LDP per element)."""
    rng = np.random.default_rng(5)
    lo = (encode_1bit(np.full(40_000, -DELTA), delta=DELTA, strength=BETA, rng=rng) == 1).mean()
    hi = (encode_1bit(np.full(40_000, DELTA), delta=DELTA, strength=BETA, rng=rng) == 1).mean()
    assert abs(lo - 1 / (math.e + 1)) < 0.01 and abs(hi - math.e / (math.e + 1)) < 0.01


def test_rdp_exact_matches_numeric_divergence() -> None:
    p = math.e / (math.e + 1)
    a = 1.5
    direct = math.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)
    assert rdp_epsilon(strength=BETA, size=1, alpha=a) == pytest.approx(direct, rel=1e-12)
    assert rdp_epsilon(strength=BETA, size=64, alpha=a) == pytest.approx(64 * direct, rel=1e-12)
    # RDP never exceeds the pure-DP level β per element
    assert rdp_epsilon(strength=BETA, size=1, alpha=50.0) < BETA


def test_rdp_paper_formula() -> None:
    """Theorem 1 at δ=0.1, β=1, n_s=1: 1.26 (the paper's 0.54 is the base-10 log)."""
    eps = rdp_epsilon_paper(delta=DELTA, strength=BETA, size=1)
    assert eps == pytest.approx(1.2602, abs=1e-3)
    assert eps / math.log(10) == pytest.approx(0.547, abs=2e-3)
    assert eps >= rdp_epsilon(strength=BETA, size=1)


def test_rdp_to_dp() -> None:
    assert rdp_to_dp(rdp_eps=0.5, alpha=1.5, target_delta=1e-5) == pytest.approx(0.5 + 2 * math.log(1e5))
