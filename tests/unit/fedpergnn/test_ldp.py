"""FedPerGNN LDP: clipping + Laplace noise."""

from __future__ import annotations

import numpy as np
import pytest

from services.fedpergnn.ldp import ldp_epsilon, ldp_perturb


def test_mean_is_clipped_value_and_variance_is_two_lambda_squared() -> None:
    """200k draws per element: mean std ≈ 0.0006 (tol 0.004); var 0.08 ± 0.0006 (tol 0.004)."""
    x = np.array([-1.0, -0.05, 0.0, 0.08, 3.0])
    out = ldp_perturb(np.tile(x, (200_000, 1)), clip=0.1, scale=0.2, rng=np.random.default_rng(1))
    assert out.dtype == np.float32 and out.shape == (200_000, 5)
    np.testing.assert_allclose(out.mean(axis=0), np.clip(x, -0.1, 0.1), atol=0.004)
    np.testing.assert_allclose(out.var(axis=0), 2 * 0.2**2, atol=0.004)


def test_deterministic_given_rng_and_validates() -> None:
    a = ldp_perturb(np.ones(4), rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, ldp_perturb(np.ones(4), rng=np.random.default_rng(9)))
    with pytest.raises(ValueError):
        ldp_perturb(np.array([np.inf]), rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        ldp_perturb(np.ones(2), scale=0.0, rng=np.random.default_rng(0))


def test_epsilon() -> None:
    assert ldp_epsilon() == pytest.approx(1.0)
    assert ldp_epsilon(clip=0.1, scale=0.2, size=256) == pytest.approx(256.0)
