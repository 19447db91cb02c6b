"""The social party P2 of P4GCN: holds the social graph and W_P2, serves noisy sandwich products.

Per epoch the rating party uploads its (clipped) user features X once, in row chunks. For each
batch of users B it asks for the forward product Y_B = (B L_sym) X W_P2 + Z and, once, the
backward product (B L_sym B^T) G W_P2^T + Z', and may push encrypted row updates of X.
Z, Z' ~ MN(0, sigma^2 I, I) (aMGM, isotropic) with sigma = z * s2, s2 from `dp.sensitivity`.
Privacy assumption: the rating party clips rows of X and G to norm <= C (it is honest-but-
curious; the social party cannot check ciphertext norms, it checks plaintext ones).
The engine (services.p4gcn.engines) holds X as plaintext (`PlainEngine`: no-crypto reference / fast
experiments) or as Paillier ciphertexts (`PaillierEngine`, built by `paillier_social_party`).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from phe import PaillierPublicKey
from pydantic import BaseModel, ConfigDict, Field

from services.crypto import dp
from services.crypto.paillier import PaillierContext
from services.errors import ProtocolError, ValidationFailed
from services.p4gcn.engines import PaillierEngine, ProductEngine
from services.p4gcn.graph import batch_block, batch_rows, normalized_laplacian, public_l1_bound
from services.p4gcn.keys import check_key

Composition = Literal["row-disjoint", "sequential"]


class SocialPartyConfig(BaseModel):
    """DP, shape and safety settings of the social party (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim: int = Field(64, ge=1, le=1024)
    clip_norm: float = Field(1.0, gt=0.0)
    epsilon_budget: float = Field(15.0, gt=0.0)
    delta: float = Field(1e-4, gt=0.0, lt=1.0)
    dp_enabled: bool = True  # False only for the no-noise reference run
    backward_enabled: bool = True  # False: forward products only (one release per batch/epoch)
    noise_multiplier: float | None = Field(None, gt=0.0)  # None: calibrated from the plan below
    planned_epochs: int = Field(5, ge=1)
    planned_batches_per_epoch: int = Field(1, ge=1)  # used by "sequential" calibration only
    composition: Composition = "row-disjoint"
    laplacian_scale: float = Field(1.0, gt=0.0)
    max_batch: int = Field(4096, ge=1)
    min_key_bits: int = Field(2048, ge=256)


class SocialParty:
    """Framework-free social party: validates, spends the DP budget, and delegates products to an engine."""

    def __init__(self, *, config: SocialPartyConfig, adjacency: sp.spmatrix, engine: ProductEngine,
                 rng: np.random.Generator) -> None:
        self.config = config
        self.engine = engine
        self.rng = rng
        self.adjacency = sp.csr_matrix(adjacency)
        self.n_users = self.adjacency.shape[0]
        self.laplacian = normalized_laplacian(self.adjacency, scale=config.laplacian_scale)
        d, c = config.dim, config.clip_norm
        # W_P2: Gaussian (≈ full rank), clipped once to spectral norm C, then frozen.
        self.w_p2 = dp.clip_spectral(rng.normal(0.0, 1.0 / np.sqrt(d), size=(d, d)), c)
        self.sensitivity = dp.sensitivity(c, scale=config.laplacian_scale)
        self.noise_multiplier = self._noise_multiplier()
        self.sigma = self.noise_multiplier * self.sensitivity if config.dp_enabled else 0.0
        self.accountant = dp.PrivacyAccountant(self.noise_multiplier, releases_per_batch=self._releases)
        self.epochs = self.batches = 0
        self._seen = np.zeros(self.n_users, dtype=bool)
        self._charged_epoch = False
        self._pending: np.ndarray | None = None
        self._open = False

    @property
    def _releases(self) -> int:
        """Gaussian releases per charged unit: forward (+ backward)."""
        return 2 if self.config.backward_enabled else 1

    def _noise_multiplier(self) -> float:
        cfg = self.config
        if cfg.noise_multiplier is not None:
            return cfg.noise_multiplier
        per_epoch = 1 if cfg.composition == "row-disjoint" else cfg.planned_batches_per_epoch
        return dp.calibrate_sigma(cfg.epsilon_budget, cfg.delta, self._releases * per_epoch * cfg.planned_epochs)

    def begin_epoch(self) -> None:
        """Start a new epoch: a fresh upload of X follows; row-disjointness restarts."""
        self.engine.start(self.n_users, self.config.dim)
        self._seen[:] = False
        self._charged_epoch = False
        self._pending = None
        self._open = True
        self.epochs += 1

    def upload_x(self, offset: int, chunk: Any) -> None:
        """Receive rows [offset, offset + len) of this epoch's X."""
        if not self._open:
            raise ProtocolError("no epoch open: call begin_epoch first")
        self.engine.put_rows(offset, chunk)

    def _users(self, users: Any) -> np.ndarray:
        u = np.asarray(users)
        if u.ndim != 1 or u.size == 0 or u.dtype.kind not in "iu":
            raise ValidationFailed("users must be a non-empty 1-D integer array")
        if u.size > self.config.max_batch:
            raise ValidationFailed(f"batch of {u.size} users exceeds {self.config.max_batch}")
        if u.min() < 0 or u.max() >= self.n_users or np.unique(u).size != u.size:
            raise ValidationFailed("user indices out of range or repeated")
        return u.astype(np.int64)

    def _charge(self, users: np.ndarray) -> None:
        """Spend budget before releasing: per batch (sequential) or once per epoch (row-disjoint)."""
        row_disjoint = self.config.composition == "row-disjoint"
        if row_disjoint and self._seen[users].any():
            raise ProtocolError("a user was already queried in this epoch (row-disjoint batches)")
        if self.config.dp_enabled and not (row_disjoint and self._charged_epoch):
            self.accountant.require(self.config.epsilon_budget, self.config.delta, 1)
            self.accountant.spend(1)
        self._charged_epoch = True
        self._seen[users] = True

    def forward(self, users: Any) -> Any:
        """Y_B = (B L_sym) X W_P2 + Z for the batch users (budget is spent first)."""
        u = self._users(users)
        if not self._open or not self.engine.complete():
            raise ProtocolError("X of this epoch is not completely uploaded")
        self._charge(u)
        noise = dp.amgm_noise((u.size, self.config.dim), sigma=self.sigma, rng=self.rng)
        result = self.engine.forward(batch_rows(self.laplacian, u), self.w_p2, noise)
        self._pending = u
        self.batches += 1
        return result

    def backward(self, users: Any, grad: Any) -> Any:
        """(B L_sym B^T) G W_P2^T + Z' for the batch whose forward product was served last (at most once)."""
        u = self._users(users)
        if not self.config.backward_enabled:
            raise ProtocolError("this session serves forward products only")
        if self._pending is None or not np.array_equal(self._pending, u):
            raise ProtocolError("backward must follow the forward product of the same batch")
        noise = dp.amgm_noise((u.size, self.config.dim), sigma=self.sigma, rng=self.rng)
        result = self.engine.backward(batch_block(self.laplacian, u), grad, self.w_p2.T, noise)
        self._pending = None
        return result

    def update_x(self, users: Any, delta: Any) -> None:
        """X[users] += delta (homomorphically on the encrypted path)."""
        u = self._users(users)
        if not self._open or not self.engine.complete():
            raise ProtocolError("X of this epoch is not completely uploaded")
        self.engine.add_rows(u, delta)

    def privacy_record(self) -> dict[str, Any]:
        """Epsilon spent, delta, sigma, clipping norm, batches and epochs served."""
        cfg = self.config
        spent = self.accountant.epsilon_spent(cfg.delta) if cfg.dp_enabled else None  # None: no DP
        return {
            "dp_enabled": cfg.dp_enabled, "epsilon_spent": spent, "epsilon_budget": cfg.epsilon_budget,
            "delta": cfg.delta, "noise_multiplier": self.noise_multiplier, "sigma": self.sigma,
            "sensitivity": self.sensitivity, "clip_norm": cfg.clip_norm, "composition": cfg.composition,
            "batches": self.batches, "epochs": self.epochs, "charged_units": self.accountant.batches,
            "releases_per_unit": self._releases,
        }


def paillier_social_party(*, config: SocialPartyConfig, adjacency: sp.spmatrix, public_key: PaillierPublicKey,
                          h_s: int, rng: np.random.Generator, workers: int = 1) -> SocialParty:
    """A SocialParty whose engine holds [X] under the rating party's key (checked to be >= min_key_bits)."""
    check_key(public_key, config.min_key_bits)
    ctx = PaillierContext(public_key, h_s, workers=workers)
    lap = normalized_laplacian(sp.csr_matrix(adjacency), scale=config.laplacian_scale)
    engine = PaillierEngine(ctx, clip_norm=config.clip_norm, left_l1_bound=public_l1_bound(lap), noise_bound=1.0)
    party = SocialParty(config=config, adjacency=adjacency, engine=engine, rng=rng)
    engine.noise_bound = 12.0 * party.sigma if party.sigma > 0 else 2.0**-8
    return party
