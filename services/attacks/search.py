"""Matching what a user's message shows against the fake users' (VerFedGNN eq. 11, eqs. 62/64, App. J.4).

Two searches over a reference set of F vectors (one per fake user, hence per attacked item):
`nearest_match` pairs each observed vector with the closest reference (eq. 11, for messages that
carry individual item embeddings), `subset_search` finds the subset of at most `max_items`
references whose combination is closest in l1 to each target (eqs. 62/64 for aggregates, J.4 for
gradients). Enumerating every subset of up to 3 of F ≈ 700 references is ~5·10⁷ per user, so the
search is a beam search: the best `beam` subsets of size c are extended by every reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

Combine = Callable[[torch.Tensor, int], torch.Tensor]


def gcn_mean(sums: torch.Tensor, size: int) -> torch.Tensor:
    """GCN aggregates: a user with c items shows (1/√c) Σ of the one-item rows (eq. 62)."""
    return sums / float(np.sqrt(size))


def max_normalized(vectors: torch.Tensor, size: int = 1) -> torch.Tensor:
    """Scale each vector to [−1, 1] by its largest magnitude (App. J.4, for quantized gradients)."""
    peak = vectors.abs().amax(dim=-1, keepdim=True)
    return vectors / torch.where(peak > 0, peak, torch.ones_like(peak))


def nearest_match(observed: np.ndarray, reference: np.ndarray, *, ratio: float = 0.5) -> np.ndarray:
    """Index of the l1-nearest reference of each observed row, or -1 when the match is ambiguous.

    A match is accepted when the nearest reference is closer than `ratio` × the second nearest:
    an item no fake user rated has no exact counterpart, so its two nearest references are about
    equally far and it stays unmatched.
    """
    if reference.shape[0] == 0 or observed.shape[0] == 0:
        return np.full(observed.shape[0], -1, dtype=np.int64)
    obs = torch.from_numpy(np.asarray(observed, np.float32))
    ref = torch.from_numpy(np.asarray(reference, np.float32))
    dist = torch.cdist(obs, ref, p=1.0)
    k = min(2, ref.shape[0])
    best = torch.topk(dist, k, dim=1, largest=False)
    first = best.values[:, 0]
    second = best.values[:, 1] if k == 2 else torch.full_like(first, float("inf"))
    ok = first <= ratio * second
    return torch.where(ok, best.indices[:, 0], torch.full_like(best.indices[:, 0], -1)).numpy().astype(np.int64)


def _distances(targets: torch.Tensor, ref: torch.Tensor, sums: torch.Tensor, size: int,
               combine: Combine) -> torch.Tensor:
    """(n, b, F) mean l1 distance of each target to combine(sum of its b subsets + each reference)."""
    n, b, d = sums.shape
    if combine is gcn_mean:  # linear: |t − (s + r)/√c| = |√c·t − s − r| / √c, one cdist instead of (n, b, F, D)
        root = float(np.sqrt(size))
        lhs = (root * targets.view(n, 1, d) - sums).reshape(n * b, d)
        return (torch.cdist(lhs, ref, p=1.0) / (root * d)).view(n, b, -1)
    cand = sums.unsqueeze(2) + ref.view(1, 1, ref.shape[0], d)
    return (combine(cand, size) - targets.view(n, 1, 1, d)).abs().mean(dim=-1)


def _extend(targets: torch.Tensor, ref: torch.Tensor, sets: torch.Tensor, sums: torch.Tensor, size: int,
            combine: Combine, beam: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Grow each of the (n, b) current subsets by one reference; keep the best `beam` distinct subsets."""
    n, b = sets.shape[:2]
    f = ref.shape[0]
    dist = _distances(targets, ref, sums, size, combine)
    if sets.shape[2]:  # a reference already in the subset cannot be added again
        used = torch.zeros(n, b, f, dtype=torch.bool)
        used.scatter_(2, sets, True)
        dist = dist.masked_fill(used, float("inf"))
    flat = dist.view(n, b * f)
    width = min(b * f, 4 * beam)
    best = torch.topk(flat, width, dim=1, largest=False)
    parent, new = best.indices // f, best.indices % f
    grown = torch.cat([torch.gather(sets, 1, parent.unsqueeze(2).expand(-1, -1, sets.shape[2])),
                       new.unsqueeze(2)], 2)
    # {a, b} is reached from parent a and from parent b: drop later copies of the same unordered subset
    key = torch.zeros(n, width, dtype=torch.int64)
    for col in range(grown.shape[2]):
        key = key * (f + 1) + torch.sort(grown, dim=2).values[:, :, col]
    earlier = torch.tril(torch.ones(width, width, dtype=torch.bool), diagonal=-1)
    dup = ((key.unsqueeze(2) == key.unsqueeze(1)) & earlier).any(dim=2) | ~torch.isfinite(best.values)
    rank = torch.where(dup, torch.full_like(key, width), torch.arange(width).expand(n, -1))
    pick = torch.sort(rank, dim=1).values[:, :beam].clamp(max=width - 1)  # duplicates last (rare: repeat)
    out_sets = torch.gather(grown, 1, pick.unsqueeze(2).expand(-1, -1, grown.shape[2]))
    return out_sets, ref[out_sets].sum(dim=2), torch.gather(best.values, 1, pick)


def subset_search(targets: np.ndarray, reference: np.ndarray, *, combine: Combine, max_items: int = 3,
                  beam: int = 8, target_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  chunk: int = 16) -> list[np.ndarray]:
    """For each target, the subset (size 1..max_items) of references whose `combine`d sum is l1-closest.

    Args:
        targets: (n, D) what the attacker observes for each honest user.
        reference: (F, D) what it observes for each fake user (fake user j ↔ row j).
        combine: maps (..., D) sums of c references to what a user with those c items would show.
        max_items: largest subset size tried (the paper's limit is 3).
        beam: subsets of each size kept for extension.
        target_transform: applied to the targets first (e.g. the same [−1, 1] normalisation).

    Returns:
        One int64 array of reference indices per target (the best subset over all sizes).
    """
    ref = torch.from_numpy(np.asarray(reference, np.float32))
    f = ref.shape[0]
    if f == 0:
        return [np.zeros(0, np.int64) for _ in range(targets.shape[0])]
    out: list[np.ndarray] = []
    all_t = torch.from_numpy(np.asarray(targets, np.float32))
    if target_transform is not None:
        all_t = target_transform(all_t)
    width = min(beam, f)
    for start in range(0, all_t.shape[0], chunk):
        t = all_t[start:start + chunk]
        n = t.shape[0]
        sets = torch.zeros(n, 1, 0, dtype=torch.int64)
        sums = torch.zeros(n, 1, ref.shape[1])
        best_sets: list[torch.Tensor] = []
        best_dist: list[torch.Tensor] = []
        for size in range(1, min(max_items, f) + 1):
            sets, sums, dist = _extend(t, ref, sets, sums, size, combine, width)
            best_sets.append(sets[:, 0])
            best_dist.append(dist[:, 0])
        pick = torch.argmin(torch.stack(best_dist, 1), dim=1).tolist()
        out.extend(best_sets[c][i].numpy().astype(np.int64) for i, c in enumerate(pick))
    return out
