"""The social party P2 of P4GCN: holds the social graph and W_P2, serves noisy sandwich products.

Per epoch the rating party uploads its (clipped) user features X once, in row chunks. For each
batch of users B it asks for the forward product Y_B = (B L_sym) X W_P2 + Z and, once, the
backward product (B L_sym B^T) G W_P2^T + Z', and may push encrypted row updates of X.
Z, Z' ~ MN(0, sigma^2 I, I) (aMGM, isotropic) with sigma = z * s2, s2 from `dp.sensitivity`.
Privacy assumption: the rating party clips rows of X and G to norm <= C (it is honest-but-
curious; the social party cannot check ciphertext norms, it checks plaintext ones).
The engine holds X as plaintext (`PlainEngine`: no-crypto reference / fast experiments) or as
Paillier ciphertexts (`services.party.social_paillier.PaillierEngine`).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field

from services.crypto import dp
from services.errors import ProtocolError, ValidationFailed
from services.party.social_graph import batch_block, batch_rows, normalized_laplacian

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


class ProductEngine(Protocol):
    """Where X lives (plaintext or ciphertext) and how the two sandwich products are computed."""

    bytes_in: int
    bytes_out: int

    def start(self, n_rows: int, dim: int) -> None: ...
    def put_rows(self, offset: int, chunk: Any) -> None: ...
    def complete(self) -> bool: ...
    def forward(self, left: sp.csr_matrix, right: np.ndarray, noise: np.ndarray) -> Any: ...
    def backward(self, left: sp.csr_matrix, middle: Any, right: np.ndarray, noise: np.ndarray) -> Any: ...
    def add_rows(self, users: np.ndarray, delta: Any) -> None: ...


class PlainEngine:
    """X in plaintext at the social party (reference path; same noise as the encrypted path)."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = clip_norm
        self.x: np.ndarray | None = None
        self.filled: np.ndarray | None = None
        self.bytes_in = self.bytes_out = 0

    def start(self, n_rows: int, dim: int) -> None:
        """Allocate an empty X."""
        self.x = np.zeros((n_rows, dim))
        self.filled = np.zeros(n_rows, dtype=bool)

    def _check_rows(self, rows: np.ndarray) -> np.ndarray:
        arr = np.asarray(rows, dtype=np.float64)
        if arr.ndim != 2 or (self.x is not None and arr.shape[1] != self.x.shape[1]):
            raise ValidationFailed(f"rows of shape {arr.shape} do not match dim")
        if not np.isfinite(arr).all():
            raise ValidationFailed("rows contain NaN or infinity")
        if arr.size and float(np.linalg.norm(arr, axis=1).max()) > self.clip_norm * (1 + 1e-6):
            raise ValidationFailed(f"a row exceeds the clipping norm {self.clip_norm}")
        return arr

    def put_rows(self, offset: int, chunk: Any) -> None:
        """Store a chunk of X rows at `offset`."""
        assert self.x is not None and self.filled is not None
        arr = self._check_rows(chunk)
        if offset < 0 or offset + arr.shape[0] > self.x.shape[0]:
            raise ValidationFailed(f"chunk rows [{offset}, {offset + arr.shape[0]}) outside X")
        self.x[offset:offset + arr.shape[0]] = arr
        self.filled[offset:offset + arr.shape[0]] = True
        self.bytes_in += arr.size * 8

    def complete(self) -> bool:
        """Whether every row of X has been uploaded."""
        return self.filled is not None and bool(self.filled.all())

    def forward(self, left: sp.csr_matrix, right: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """(B L) X W + Z."""
        assert self.x is not None
        out = np.asarray(left @ self.x) @ right + noise
        self.bytes_out += out.size * 8
        return out

    def backward(self, left: sp.csr_matrix, middle: Any, right: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """(B L B^T) G W^T + Z'."""
        g = self._check_rows(middle)
        self.bytes_in += g.size * 8
        out = np.asarray(left @ g) @ right + noise
        self.bytes_out += out.size * 8
        return out

    def add_rows(self, users: np.ndarray, delta: Any) -> None:
        """X[users] += delta, refusing results outside the clipping norm."""
        assert self.x is not None
        d = np.asarray(delta, dtype=np.float64)
        if d.shape != (len(users), self.x.shape[1]) or not np.isfinite(d).all():
            raise ValidationFailed(f"update of shape {d.shape} for {len(users)} users")
        self._check_rows(self.x[users] + d)
        self.x[users] += d
        self.bytes_in += d.size * 8


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
