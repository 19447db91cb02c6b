"""DP for the social products: clipping, sensitivity bound, aMGM noise, accountant, calibration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from services.crypto import dp
from services.errors import PrivacyBudgetExhausted
from services.p4gcn.graph import normalized_laplacian


def test_clip_rows_bounds_and_keeps_small_rows() -> None:
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = dp.clip_rows(x, 1.0)
    assert np.allclose(np.linalg.norm(out, axis=1), [1.0, 0.5, 0.0])
    assert np.allclose(out[1], x[1])
    assert np.linalg.norm(dp.clip_spectral(np.eye(3) * 5, 1.0), ord=2) == pytest.approx(1.0)


def _random_graph(n: int, p: float, rng: np.random.Generator) -> sp.csr_matrix:
    upper = np.triu(rng.random((n, n)) < p, 1)
    return sp.csr_matrix((upper | upper.T).astype(float))


def test_sensitivity_bound_holds_for_every_single_link_flip() -> None:
    rng = np.random.default_rng(0)
    bound = dp.sensitivity(1.0)
    worst = 0.0
    for trial in range(6):
        a = _random_graph(7, [0.1, 0.3, 0.6][trial % 3], rng)
        lap = normalized_laplacian(a).toarray()
        for i, j in itertools.combinations(range(7), 2):
            b = a.tolil()
            b[i, j] = b[j, i] = 1.0 - a[i, j]
            delta = normalized_laplacian(b.tocsr()).toarray() - lap
            # worst case over rows of X with norm <= 1 and ||W||_2 <= 1: sum of squared row l1 norms
            worst = max(worst, float(np.sqrt((np.abs(delta).sum(axis=1) ** 2).sum())))
            x = dp.clip_rows(rng.normal(size=(7, 5)), 1.0)
            w = dp.clip_spectral(rng.normal(size=(5, 5)), 1.0)
            assert np.linalg.norm(delta @ x @ w) <= bound
    assert worst <= bound
    assert dp.sensitivity(1.0, scale=0.01) == pytest.approx(0.01 * bound)


def test_paper_row_sensitivity_eq8() -> None:
    a = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=float))
    s = dp.paper_row_sensitivity(a)
    assert s[2] == pytest.approx(1.0)  # isolated user, c_o = 1
    assert (s <= 2.0).all() and s[0] == pytest.approx(np.sqrt((1 / 2 + 1 / 2) / 2 + 1.0))


def test_amgm_noise_covariance() -> None:
    rng = np.random.default_rng(1)
    u = np.array([[1.0, 0.0], [0.5, 2.0]])
    v = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.3, 0.0, 1.0]])
    sigma, reps = 0.7, 20_000
    z = np.stack([dp.amgm_noise((2, 3), sigma=sigma, rng=rng, row_factor=u, col_factor=v) for _ in range(reps)])
    sigma1, sigma2 = u @ u.T, v @ v.T
    row_cov = np.einsum("kij,klj->il", z, z) / reps  # E[Z Z^T] = sigma^2 tr(Sigma2) Sigma1
    col_cov = np.einsum("kji,kjl->il", z, z) / reps  # E[Z^T Z] = sigma^2 tr(Sigma1) Sigma2
    assert np.allclose(row_cov, sigma**2 * np.trace(sigma2) * sigma1, rtol=0.05, atol=0.05)
    assert np.allclose(col_cov, sigma**2 * np.trace(sigma1) * sigma2, rtol=0.05, atol=0.05)
    iso = dp.amgm_noise((400, 50), sigma=2.0, rng=rng)
    assert iso.mean() == pytest.approx(0.0, abs=0.03) and iso.std() == pytest.approx(2.0, rel=0.02)
    assert dp.effective_noise_multiplier(2.0, 1.0, u, v) == pytest.approx(
        2.0 * np.linalg.svd(u, compute_uv=False).min() * np.linalg.svd(v, compute_uv=False).min())


@pytest.mark.parametrize("kind", ["pld", "rdp"])
def test_calibration_meets_target(kind: dp.AccountantKind) -> None:
    z = dp.calibrate_sigma(15.0, 1e-4, 10, kind=kind)
    acc = dp.PrivacyAccountant(z, releases_per_batch=1, kind=kind)
    acc.spend(10)
    eps = acc.epsilon_spent(1e-4)
    assert 15.0 * 0.97 <= eps <= 15.0
    looser = dp.PrivacyAccountant(z * 0.97, releases_per_batch=1, kind=kind)
    looser.spend(10)
    assert looser.epsilon_spent(1e-4) > 15.0


def test_accountant_is_monotone_and_enforces_budget() -> None:
    acc = dp.PrivacyAccountant(2.0, releases_per_batch=2)
    spent = []
    for _ in range(5):
        acc.spend(1)
        spent.append(acc.epsilon_spent(1e-4))
    assert all(b > a for a, b in itertools.pairwise(spent))
    assert acc.can_spend(spent[-1] * 1.5, 1e-4) and not acc.can_spend(spent[-1], 1e-4)
    with pytest.raises(PrivacyBudgetExhausted) as err:
        acc.require(spent[-1], 1e-4)
    assert err.value.extra["epsilon_spent"] == pytest.approx(spent[-1])


def test_row_disjoint_epochs_cost_one_release_each() -> None:
    assert dp.releases_for(7, batches_per_epoch=None, releases_per_batch=2) == 14
    assert dp.releases_for(7, batches_per_epoch=3, releases_per_batch=2) == 6  # 3 started epochs
