"""Centralized top-K baselines (every item in one place): most-popular, EASE, BPR-MF and LightGCN trained with BPR.

Each trains on the training ratings (every rating is an implicit positive, as for the federated
model) and picks its hyper-parameter or its epoch on the validation ratings (relevant = valid ≥ 4,
candidates = items outside train), then returns a (N, M) score matrix for the test protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from models.lightgcn import normalized_bipartite
from models.mf import BiasedMF, MFConfig
from services.evaluation import ranking

EASE_LAMBDAS = (50.0, 100.0, 200.0, 400.0, 800.0, 1600.0)


@dataclass(frozen=True)
class Implicit:
    """Training pairs of a catalogue plus the validation protocol used to tune on it."""

    n_users: int
    n_items: int
    users: np.ndarray  # int64 training pairs
    items: np.ndarray
    valid_relevant: dict[int, set[int]]

    def matrix(self) -> np.ndarray:
        """(N, M) binary interaction matrix."""
        x = np.zeros((self.n_users, self.n_items), dtype=np.float64)
        x[self.users, self.items] = 1.0
        return x

    def valid_ndcg(self, scores: np.ndarray) -> float:
        """NDCG@10 on the validation ratings (training items excluded)."""
        seen = self.matrix() > 0
        return ranking.evaluate_scores(scores, seen=seen, relevant=self.valid_relevant,
                                       train_counts=np.zeros(self.n_items), ks=(10,))["ndcg@10"]


def most_popular(data: Implicit) -> np.ndarray:
    """Every user gets the items ranked by training count."""
    counts = np.bincount(data.items, minlength=data.n_items).astype(np.float64)
    return np.broadcast_to(counts, (data.n_users, data.n_items)).copy()


def ease(data: Implicit, lambdas: Sequence[float] = EASE_LAMBDAS) -> tuple[np.ndarray, float]:
    """EASE (Steck 2019): B = I − P·diag(1/diag P) with P = (XᵀX + λI)⁻¹, diag B = 0; λ by validation NDCG@10."""
    x = data.matrix()
    gram = x.T @ x
    best: tuple[float, np.ndarray, float] | None = None
    for lam in lambdas:
        p = np.linalg.inv(gram + lam * np.eye(data.n_items))
        b = -p / np.diag(p)[None, :]
        np.fill_diagonal(b, 0.0)
        scores = x @ b
        v = data.valid_ndcg(scores)
        if best is None or v > best[0]:
            best = (v, scores, lam)
    assert best is not None
    return best[1], best[2]


def _negatives(data: Implicit, users: np.ndarray, seen: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniform items outside each user's training set (redrawn until unseen)."""
    neg = np.asarray(rng.integers(0, data.n_items, size=int(users.shape[0])), dtype=np.int64)
    bad = seen[users, neg]
    while bad.any():
        neg[bad] = rng.integers(0, data.n_items, size=int(bad.sum()))
        bad = seen[users, neg]
    return neg


def _train_bpr(data: Implicit, *, embed: Callable[[], tuple[torch.Tensor, torch.Tensor]], item_bias: torch.Tensor | None,
               params: list[torch.nn.Parameter], reg_rows: Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                                                  torch.Tensor],
               lr: float, epochs: int, batch: int, seed: int, eval_every: int, patience: int
               ) -> tuple[np.ndarray, float]:
    """BPR with Adam; the epoch with the best validation NDCG@10 gives the returned scores (and that NDCG)."""
    rng = np.random.default_rng(seed)
    seen = data.matrix() > 0
    opt = torch.optim.Adam(params, lr=lr)
    best, best_scores, since = -1.0, np.zeros((data.n_users, data.n_items)), 0
    for epoch in range(epochs):
        order = rng.permutation(data.users.shape[0])
        for start in range(0, order.shape[0], batch):
            idx = order[start:start + batch]
            u, i = data.users[idx], data.items[idx]
            j = _negatives(data, u, seen, rng)
            ut, it, jt = (torch.from_numpy(a) for a in (u, i, j))
            hu, hv = embed()
            diff = (hu[ut] * (hv[it] - hv[jt])).sum(1)
            if item_bias is not None:
                diff = diff + item_bias[it] - item_bias[jt]
            loss = -torch.nn.functional.logsigmoid(diff).mean() + reg_rows(ut, it, jt)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if (epoch + 1) % eval_every == 0:
            with torch.no_grad():
                hu, hv = embed()
                s = hu @ hv.T if item_bias is None else hu @ hv.T + item_bias
                scores = s.numpy().astype(np.float64)
            v = data.valid_ndcg(scores)
            if v > best:
                best, best_scores, since = v, scores, 0
            else:
                since += 1
                if since >= patience:
                    break
    return best_scores, best


def bpr_mf(data: Implicit, *, dim: int = 64, lr: float = 0.005, reg: float = 1e-4, epochs: int = 300,
           batch: int = 1024, seed: int = 0) -> tuple[np.ndarray, float]:
    """The biased MF of models/mf.py trained with BPR (uniform unseen negatives): ranks by p_u·q_v + b_v.

    μ and b_u cancel in a pairwise loss, so only the factors and the item bias train.
    """
    mf = BiasedMF(MFConfig(dim=dim), n_users=data.n_users, n_items=data.n_items, global_mean=0.0, seed=seed)
    p, q, b = mf.user_emb, mf.item_emb, mf.item_bias

    def l2(u: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        return reg * (p[u].pow(2).sum() + q[i].pow(2).sum() + q[j].pow(2).sum()
                      + b[i].pow(2).sum() + b[j].pow(2).sum()) / u.shape[0]

    return _train_bpr(data, embed=lambda: (p, q), item_bias=b, params=[p, q, b], reg_rows=l2, lr=lr, epochs=epochs, batch=batch,
                      seed=seed, eval_every=5, patience=6)


def lightgcn_bpr(data: Implicit, *, dim: int = 64, layers: int = 3, lr: float = 0.01, reg: float = 1e-4,
                 epochs: int = 300, batch: int = 4096, seed: int = 0) -> tuple[np.ndarray, float]:
    """LightGCN (mean of K+1 propagated layers over the normalised bipartite graph) trained with BPR."""
    gen = torch.Generator().manual_seed(seed)
    e0 = torch.nn.Parameter(torch.randn(data.n_users + data.n_items, dim, generator=gen) * 0.1)
    adj = normalized_bipartite(data.users, data.items, data.n_users, data.n_items)

    def embed() -> tuple[torch.Tensor, torch.Tensor]:
        out: torch.Tensor = e0
        x: torch.Tensor = e0
        for _ in range(layers):
            x = torch.sparse.mm(adj, x)
            out = out + x
        out = out / (layers + 1)
        return out[:data.n_users], out[data.n_users:]

    def l2(u: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        n = data.n_users
        return reg * (e0[u].pow(2).sum() + e0[n + i].pow(2).sum() + e0[n + j].pow(2).sum()) / u.shape[0]

    return _train_bpr(data, embed=embed, item_bias=None, params=[e0], reg_rows=l2, lr=lr, epochs=epochs, batch=batch, seed=seed,
                      eval_every=5, patience=6)


# L2 grids picked on ML-100K u1 seed 0 validation (BPR-MF: 1e-1 collapses to popularity, 1e-3 overfits)
GRIDS: dict[str, tuple[float, ...]] = {"bpr_mf": (3e-3, 1e-2, 3e-2), "lightgcn_bpr": (1e-3, 1e-2)}


def tuned(train: Callable[..., tuple[np.ndarray, float]], data: Implicit, *, seed: int,
          grid: Sequence[float] | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """Train over the L2 grid; the scores of the best validation NDCG@10, and its L2 and validation NDCG."""
    best: tuple[float, np.ndarray, float] | None = None
    for reg in grid if grid is not None else GRIDS[train.__name__]:
        scores, valid = train(data, reg=reg, seed=seed)
        if best is None or valid > best[0]:
            best = (valid, scores, reg)
    assert best is not None
    return best[1], {"reg": best[2], "valid_ndcg@10": best[0]}
