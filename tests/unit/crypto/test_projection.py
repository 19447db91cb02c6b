"""Random projection: shapes, determinism, linearity, unbiasedness, error formula."""

from __future__ import annotations

import numpy as np
import pytest

from services.crypto.projection import (
    ProjectionSpec,
    project,
    projection_matrix,
    projection_spec,
    reconstruct,
)

KINDS = ["gaussian", "sparse"]


def _x(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_dtype(kind: str) -> None:
    spec = projection_spec(seed=3, n=101, ratio=0.2, kind=kind)
    assert spec.q == 20
    y = project(spec, _x(101, 6))
    assert y.shape == (20, 6) and y.dtype == np.float32
    assert reconstruct(spec, y).shape == (101, 6)
    assert project(spec, _x(101, 1)[:, 0]).shape == (20,)
    with pytest.raises(ValueError):
        project(spec, _x(100, 6))


@pytest.mark.parametrize("kind", KINDS)
def test_matches_dense_matrix_across_blocks(kind: str) -> None:
    """project/reconstruct equal Φ X / Φᵀ Y with a block size that does not divide n."""
    spec = ProjectionSpec(seed=11, n=50, q=12, kind=kind, block=7)
    phi = projection_matrix(spec)
    x = _x(50, 4)
    np.testing.assert_allclose(project(spec, x), phi @ x, rtol=1e-5, atol=1e-5)
    y = project(spec, x)
    np.testing.assert_allclose(reconstruct(spec, y), phi.T @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_from_spec(kind: str) -> None:
    """Every party regenerates the same Φ from the broadcast spec; another seed differs."""
    x = _x(64, 3)
    a = project(projection_spec(seed=5, n=64, kind=kind), x)
    b = project(projection_spec(seed=5, n=64, kind=kind), x)
    c = project(projection_spec(seed=6, n=64, kind=kind), x)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("kind", KINDS)
def test_linearity_sum_of_projections(kind: str) -> None:
    spec = projection_spec(seed=2, n=80, kind=kind)
    parts = [_x(80, 5, seed=s) for s in range(3)]
    summed = sum(project(spec, p) for p in parts)
    np.testing.assert_allclose(summed, project(spec, sum(parts)), rtol=1e-4, atol=1e-4)


def test_privacy_bound_on_q() -> None:
    projection_spec(seed=0, n=11, ratio=6 / 11)  # q = 6 = (11+1)//2 is allowed
    with pytest.raises(ValueError):
        projection_spec(seed=0, n=10, ratio=0.6)  # q = 6 > 5
    with pytest.raises(ValueError):
        ProjectionSpec(seed=0, n=10, q=6)


@pytest.mark.parametrize("kind", KINDS)
def test_unbiased_phi_t_phi_is_identity(kind: str) -> None:
    """Mean of ΦᵀΦ over 400 seeds is I (entry std ≤ 0.023, tolerance 0.1)."""
    n, q, trials = 20, 10, 400
    acc = np.zeros((n, n))
    for seed in range(trials):
        phi = projection_matrix(ProjectionSpec(seed=seed, n=n, q=q, kind=kind)).astype(np.float64)
        acc += phi.T @ phi
    assert np.abs(acc / trials - np.eye(n)).max() < 0.1


@pytest.mark.parametrize(("kind", "expected"), [("gaussian", 201 / 40), ("sparse", 199 / 40)])
def test_reconstruction_error_matches_formula(kind: str, expected: float) -> None:
    """E||ΦᵀΦX − X||² / ||X||² = (N+1)/q (Gaussian), (N−1)/q (sparse block sketch)."""
    n, q, trials = 200, 40, 300
    x = _x(n, 3)
    ratios = []
    for seed in range(trials):
        spec = ProjectionSpec(seed=seed, n=n, q=q, kind=kind)
        err = reconstruct(spec, project(spec, x)) - x
        ratios.append(float(np.sum(err.astype(np.float64) ** 2) / np.sum(x.astype(np.float64) ** 2)))
    assert abs(np.mean(ratios) - expected) < 0.04 * expected


def test_sparse_columns_have_s_distinct_unit_entries() -> None:
    spec = ProjectionSpec(seed=1, n=300, q=60, kind="sparse", nnz_per_column=4)
    phi = projection_matrix(spec)
    assert np.all((phi != 0).sum(axis=0) == 4)
    np.testing.assert_allclose((phi**2).sum(axis=0), 1.0, rtol=1e-6)


def test_phi_is_a_function_of_the_whole_spec() -> None:
    """Block size is part of Φ's definition: parties must share the spec, not only the seed."""
    a = projection_matrix(ProjectionSpec(seed=4, n=40, q=8, block=8))
    b = projection_matrix(ProjectionSpec(seed=4, n=40, q=8, block=8))
    c = projection_matrix(ProjectionSpec(seed=4, n=40, q=8, block=16))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    with pytest.raises(ValueError):
        ProjectionSpec(seed=-1, n=40, q=8)
