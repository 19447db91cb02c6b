"""EASE (Steck 2019), the closed-form item model a party fits on its own interactions, stored sparse for serving.

B = I − P·diag(1/diag P) with P = (XᵀX + λI)⁻¹ and diag B = 0; a user's score of item j is Σ_{i ∈ history} B[i, j].
The inverse is of an items × items matrix, so a catalogue larger than `MAX_ITEMS` models only its
`MAX_ITEMS` most-interacted items (the others score 0 here and rank by the federated model alone): at
4,096 items one eigendecomposition takes seconds, at 50k it would take hours and 20 GB. Each modelled
row keeps its `KEEP` largest weights by magnitude once the catalogue is larger than `KEEP`, so the
stored model is at most MAX_ITEMS × KEEP weights (4 MB) whatever the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MAX_ITEMS = 4096
KEEP = 512
LAMBDAS = (25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0)


@dataclass(frozen=True)
class Ease:
    """A fitted EASE model: row i of B (over the party's item indices) as CSR, for the modelled items only."""

    n_items: int
    lam: float
    indptr: np.ndarray  # int64 (n_items + 1,): an item outside the modelled set has an empty row
    indices: np.ndarray  # int64 item indices
    data: np.ndarray  # float32 weights

    def scores(self, history: Sequence[np.ndarray]) -> np.ndarray:
        """(len(history), n_items) scores: each row the sum of B's rows over that user's items."""
        out = np.zeros((len(history), self.n_items), np.float32)
        for r, items in enumerate(history):
            out[r] = self.user_scores(items)
        return out

    def user_scores(self, items: np.ndarray) -> np.ndarray:
        """One user's scores over the catalogue (a fresh array)."""
        out = np.zeros(self.n_items, np.float32)
        for i in np.asarray(items, np.int64).tolist():
            lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
            np.add.at(out, self.indices[lo:hi], self.data[lo:hi])
        return out

    def to_tree(self) -> dict[str, np.ndarray]:
        """Arrays for `services.protocol.federation.pack_tree` (npz, no pickle)."""
        return {"n_items": np.array(self.n_items), "lam": np.array(self.lam), "indptr": self.indptr,
                "indices": self.indices, "data": self.data}

    @staticmethod
    def from_tree(tree: dict[str, np.ndarray]) -> Ease:
        """Inverse of `to_tree`."""
        return Ease(int(tree["n_items"]), float(tree["lam"]), np.asarray(tree["indptr"], np.int64),
                    np.asarray(tree["indices"], np.int64), np.asarray(tree["data"], np.float32))


def modelled_items(users: np.ndarray, items: np.ndarray, n_items: int, max_items: int = MAX_ITEMS) -> np.ndarray:
    """The item indices EASE models: every item, or the `max_items` most interacted (ties: lower index)."""
    if n_items <= max_items:
        return np.arange(n_items)
    counts = np.bincount(items, minlength=n_items)
    return np.sort(np.lexsort((np.arange(n_items), -counts))[:max_items])


def _gram(users: np.ndarray, items: np.ndarray, cols: np.ndarray, n_items: int) -> np.ndarray:
    """XᵀX over the modelled columns (binary X: a repeated pair counts once)."""
    pos = np.full(n_items, -1, np.int64)
    pos[cols] = np.arange(len(cols))
    keep = pos[items] >= 0
    u, c = users[keep], pos[items[keep]]
    n_users = int(users.max()) + 1 if len(users) else 0
    x = np.zeros((n_users, len(cols)), np.float64)
    x[u, c] = 1.0
    return x.T @ x


def weights_path(users: np.ndarray, items: np.ndarray, n_items: int,
                 lambdas: Sequence[float] = LAMBDAS) -> tuple[np.ndarray, Callable[[float], np.ndarray]]:
    """(modelled items, λ ↦ dense B over them): one eigendecomposition serves every λ."""
    cols = modelled_items(users, items, n_items)
    vals, vecs = np.linalg.eigh(_gram(users, items, cols, n_items))

    def b_of(lam: float) -> np.ndarray:
        p = (vecs / (np.maximum(vals, 0.0) + lam)) @ vecs.T
        b = -p / np.diag(p)[None, :]
        np.fill_diagonal(b, 0.0)
        return b
    return cols, b_of


def sparse(b: np.ndarray, cols: np.ndarray, n_items: int, lam: float, keep: int = KEEP) -> Ease:
    """Store dense B over `cols` as CSR over the catalogue, each row cut to its `keep` largest |weights|."""
    k = b.shape[1]
    if k > keep:
        idx = np.argpartition(-np.abs(b), keep - 1, axis=1)[:, :keep]
        idx.sort(axis=1)
    else:
        idx = np.broadcast_to(np.arange(k), b.shape)
    lengths = np.zeros(n_items, np.int64)
    lengths[cols] = idx.shape[1]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    order = np.argsort(cols)  # rows in item order for the CSR
    indices = cols[idx[order]].reshape(-1)
    data = np.take_along_axis(b, idx, axis=1)[order].reshape(-1).astype(np.float32)
    return Ease(n_items, float(lam), indptr, indices.astype(np.int64), data)


def fit(users: np.ndarray, items: np.ndarray, n_items: int, lam: float) -> Ease:
    """EASE on interaction pairs at one λ."""
    cols, b_of = weights_path(users, items, n_items, (lam,))
    return sparse(b_of(lam), cols, n_items, lam)
