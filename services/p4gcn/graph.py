"""The social party's graph: symmetrised adjacency over the aligned users and L_sym = D^-1/2 (A + I) D^-1/2."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from services.data.types import SocialLinks


def adjacency_from_links(links: SocialLinks, user_ids: Sequence[str]) -> sp.csr_matrix:
    """Symmetric 0/1 adjacency (no self loops) over `user_ids`; links to unknown users are dropped."""
    index = {str(u): k for k, u in enumerate(user_ids)}
    n = len(index)
    src = np.fromiter((index.get(str(s), -1) for s in links.src), dtype=np.int64, count=len(links.src))
    dst = np.fromiter((index.get(str(d), -1) for d in links.dst), dtype=np.int64, count=len(links.dst))
    keep = (src >= 0) & (dst >= 0) & (src != dst)
    r = np.concatenate([src[keep], dst[keep]])
    c = np.concatenate([dst[keep], src[keep]])
    a = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n, n))
    a.data[:] = 1.0  # duplicates and reciprocal links collapse to one undirected edge
    a.eliminate_zeros()
    return a


def normalized_laplacian(adjacency: sp.spmatrix, *, scale: float = 1.0) -> sp.csr_matrix:
    """scale * D^-1/2 (A + I) D^-1/2 with D = diag(1 + sum_j a_ij) (P4GCN eq. 1), sparse CSR."""
    a = sp.csr_matrix(adjacency, dtype=np.float64)
    n = a.shape[0]
    deg = np.asarray(a.sum(axis=1)).ravel() + 1.0
    inv = sp.diags(1.0 / np.sqrt(deg))
    return sp.csr_matrix(scale * (inv @ (a + sp.identity(n, format="csr")) @ inv))


def public_l1_bound(lap: sp.csr_matrix) -> float:
    """Max row l1 norm of L_sym rounded up to a power of two: the public bound that sizes the slots."""
    l1 = float(np.abs(lap).sum(axis=1).max()) if lap.shape[0] else 1.0
    return float(2.0 ** np.ceil(np.log2(max(l1, 1e-12))))


def batch_rows(lap: sp.csr_matrix, users: np.ndarray) -> sp.csr_matrix:
    """B L_sym: the batch users' rows (forward left factor)."""
    return sp.csr_matrix(lap[users])


def batch_block(lap: sp.csr_matrix, users: np.ndarray) -> sp.csr_matrix:
    """B L_sym B^T: the batch users' rows restricted to batch columns (backward left factor)."""
    return sp.csr_matrix(lap[users][:, users])
