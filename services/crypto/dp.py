"""Differential privacy for the social sandwich products: clipping, sensitivity, aMGM noise, accounting.

Threat model (P4GCN §4.2.2): the rating party A is honest-but-curious and sees every decrypted
product J' = L M N + Z that the social party P2 returns. The protected object is P2's social
graph A_soc, with edge-level adjacency (two graphs differ in one undirected link).

Sensitivity used here (a rigorous version of the paper's eq. 7–8): rows of the middle matrix are
clipped to ||x_j||_2 <= C and W_P2 to spectral norm ||W_P2||_2 <= C. Flipping one link (i, m)
changes row i of L_sym by a vector delta_i with ||delta_i||_1 <= 1 (worst case: i isolated gains a
link, or i loses its only link), likewise row m, and shifts the rows of i's and m's neighbours by
at most (a/2)(1/sqrt(a+1) - 1/sqrt(a+2))^2 <= 0.0085 in summed squared L1 norm per endpoint
(doubled for neighbours shared by i and m). Hence for any subset of rows released (forward
L_B X W, backward L_BB G W^T):
    s2 = ||f(A) - f(A')||_F <= C^2 * sqrt(2 + 4 * 0.0085) <= 1.43 C^2,
and the same bound covers *all* rows of one epoch when the user batches partition the users.
The paper's per-user eq. 8 bound s_l(i) is given by `paper_row_sensitivity` for reference.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

import dp_accounting
import numpy as np
import scipy.sparse as sp
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from services.errors import PrivacyBudgetExhausted

AccountantKind = Literal["pld", "rdp"]
_NEIGHBOUR_SHIFT = 0.0085  # max over a >= 1 of (a/2)(1/sqrt(a+1) - 1/sqrt(a+2))^2, attained at a = 1


def clip_rows(x: np.ndarray, c: float) -> np.ndarray:
    """Scale each row r to r / max(1, ||r||_2 / c) so every row has L2 norm <= c."""
    if c <= 0:
        raise ValueError(f"clipping norm must be positive, got {c}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(1.0, norms / c)


def clip_spectral(w: np.ndarray, c: float) -> np.ndarray:
    """Scale a matrix to spectral norm <= c (done once for the frozen W_P2)."""
    top = float(np.linalg.norm(w, ord=2))
    return w / max(1.0, top / c)


def sensitivity(c: float = 1.0, *, scale: float = 1.0) -> float:
    """L2 sensitivity s2 <= scale * C^2 * sqrt(2 + 4*0.0085) of any row set of L_sym M N (see module doc).

    Args:
        c: row-clipping norm of M and spectral norm bound of N.
        scale: factor applied to L_sym (the paper uses 1/N); noise must be calibrated to the scaled value.
    """
    return scale * c * c * math.sqrt(2.0 + 4.0 * _NEIGHBOUR_SHIFT)


def paper_row_sensitivity(adjacency: sp.spmatrix) -> np.ndarray:
    """Per-user s_l(i) of the paper's eq. 8 for a symmetric 0/1 adjacency without self loops.

    s_l(i) = sqrt(1/2 + c_o/2) if a_i = 0, else sqrt(c_i/(|a_i|^2 + |a_i|) + c_o/|a_i|), with
    c_i = sum_j (a_ij + [i=j]) / (|a_j| + 1) and c_o = max_j 1/(|a_j| + 1). Always <= 2.
    """
    a = sp.csr_matrix(adjacency, dtype=np.float64)
    deg = np.asarray(a.sum(axis=1)).ravel()
    inv = 1.0 / (deg + 1.0)
    c_o = float(inv.max()) if inv.size else 1.0
    c_i = a @ inv + inv
    with np.errstate(divide="ignore", invalid="ignore"):
        linked = np.sqrt(c_i / (deg * deg + deg) + c_o / deg)
    return np.where(deg == 0, math.sqrt(0.5 + 0.5 * c_o), linked)


def amgm_noise(
    shape: tuple[int, int],
    *,
    sigma: float,
    rng: np.random.Generator,
    row_factor: np.ndarray | None = None,
    col_factor: np.ndarray | None = None,
) -> np.ndarray:
    """Sample Z ~ MN(0, Sigma1, Sigma2) as sigma * U G V^T with G i.i.d. N(0, 1), U U^T = Sigma1, V V^T = Sigma2.

    With U = V = I (default) this is the isotropic Gaussian mechanism, which for a fixed trace is the
    aMGM choice maximising sigma_min(U) sigma_min(V) (the quantity Lemma 4.4 bounds).
    """
    if sigma < 0:
        raise ValueError(f"sigma must be non-negative, got {sigma}")
    g = rng.standard_normal(shape)
    if row_factor is not None:
        g = row_factor @ g
    if col_factor is not None:
        g = g @ col_factor.T
    return sigma * g


def effective_noise_multiplier(
    sigma: float, sens: float, row_factor: np.ndarray | None = None, col_factor: np.ndarray | None = None
) -> float:
    """z = sigma * sigma_min(U) * sigma_min(V) / s2: aMGM is at least as private as a Gaussian with this z."""
    su = 1.0 if row_factor is None else float(np.linalg.svd(row_factor, compute_uv=False).min())
    sv = 1.0 if col_factor is None else float(np.linalg.svd(col_factor, compute_uv=False).min())
    return sigma * su * sv / sens


def _epsilon(noise_multiplier: float, count: int, delta: float, kind: AccountantKind) -> float:
    """epsilon of `count` adaptively composed Gaussian mechanisms, from dp_accounting."""
    if count == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    acc: dp_accounting.PrivacyAccountant
    if kind == "pld":
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    else:
        acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier), count)
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=256)
def calibrate_sigma(
    eps_total: float, delta: float, n_steps: int, *, kind: AccountantKind = "pld", rtol: float = 1e-3
) -> float:
    """Smallest noise multiplier z (sigma / s2) with epsilon(n_steps Gaussian releases, delta) <= eps_total.

    Binary search on log z using the accountant itself (no closed-form composition).
    """
    if eps_total <= 0 or not 0 < delta < 1 or n_steps < 1:
        raise ValueError("need eps_total > 0, 0 < delta < 1, n_steps >= 1")
    # Bracket: RDP (fast, looser) gives an upper end for PLD; widen until the bracket is valid.
    hi = 1.0 if kind == "rdp" else calibrate_sigma(eps_total, delta, n_steps, kind="rdp", rtol=rtol)
    lo = hi / 1.25
    while _epsilon(hi, n_steps, delta, kind) > eps_total:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            raise ValueError("budget too small to calibrate")
    while _epsilon(lo, n_steps, delta, kind) <= eps_total and lo > 1e-3:
        hi, lo = lo, lo / 2.0
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if _epsilon(mid, n_steps, delta, kind) > eps_total:
            lo = mid
        else:
            hi = mid
    return hi


def releases_for(batches: int, *, batches_per_epoch: int | None, releases_per_batch: int) -> int:
    """Number of composed Gaussian releases charged for `batches` batches.

    sequential (batches_per_epoch None): every batch is a full-sensitivity release.
    row-disjoint: batches of one epoch partition the users, so an epoch's releases of one kind
    jointly have sensitivity s2 and compose as one release (a started epoch is charged in full).
    """
    units = batches if batches_per_epoch is None else -(-batches // batches_per_epoch)
    return units * releases_per_batch


@dataclass
class PrivacyAccountant:
    """Counts sandwich-product batches and converts them to (epsilon, delta) with dp_accounting."""

    noise_multiplier: float
    releases_per_batch: int = 2  # forward + backward product
    batches_per_epoch: int | None = None
    kind: AccountantKind = "pld"
    batches: int = 0
    _cache: dict[tuple[int, float], float] = field(default_factory=dict, repr=False)

    def spend(self, n_batches: int = 1) -> None:
        """Record n_batches more batches."""
        if n_batches < 0:
            raise ValueError("n_batches must be non-negative")
        self.batches += n_batches

    def epsilon_spent(self, delta: float, *, extra_batches: int = 0) -> float:
        """epsilon at `delta` after the recorded batches (plus `extra_batches` hypothetical ones)."""
        count = releases_for(self.batches + extra_batches, batches_per_epoch=self.batches_per_epoch,
                             releases_per_batch=self.releases_per_batch)
        key = (count, delta)
        if key not in self._cache:
            self._cache[key] = _epsilon(self.noise_multiplier, count, delta, self.kind)
        return self._cache[key]

    def can_spend(self, budget_eps: float, delta: float, n_batches: int = 1) -> bool:
        """Whether n_batches more batches keep epsilon within budget_eps."""
        return self.epsilon_spent(delta, extra_batches=n_batches) <= budget_eps * (1 + 1e-9)

    def require(self, budget_eps: float, delta: float, n_batches: int = 1) -> None:
        """Raise PrivacyBudgetExhausted (with the figures) if n_batches more would exceed the budget."""
        if not self.can_spend(budget_eps, delta, n_batches):
            spent = self.epsilon_spent(delta)
            raise PrivacyBudgetExhausted(
                f"privacy budget exhausted: epsilon spent {spent:.4g} of {budget_eps:.4g} (delta {delta:g})",
                extra={"epsilon_spent": spent, "epsilon_budget": budget_eps, "delta": delta,
                       "batches": self.batches},
            )
