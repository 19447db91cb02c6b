"""Top-K ranking evaluation (SPEC §5): the metrics, full-catalogue top-K and the fan-out merge.

Protocol: relevant = a user's test ratings ≥ 4; candidates = every item the user did not rate in
training (train ∪ validation here: both are what the served model knows); recall@K = hits /
min(|relevant|, K); NDCG@K with binary gains and an ideal DCG over min(|relevant|, K) positions.
Users with no relevant item are not scored. Catalogue coverage and the median training count are
taken over the scored users' top-`summary_k` lists (every recommendation counted, so an item shown to
many users weighs as much as it is shown).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from models.metrics import RELEVANT_THRESHOLD, merge_order, top_k_columns

KS = (10, 20)
SUMMARY_K = 10


def recall_at_k(ranked: Sequence[Hashable], relevant: set[Any], k: int) -> float:
    """hits in the first k / min(|relevant|, k); 0 when nothing is relevant."""
    if not relevant:
        return 0.0
    hits = sum(1 for x in ranked[:k] if x in relevant)
    return hits / min(len(relevant), k)


def ndcg_at_k(ranked: Sequence[Hashable], relevant: set[Any], k: int) -> float:
    """Binary-gain DCG of the first k (1/log2(rank+1), rank from 1) over the ideal DCG of min(|relevant|, k) hits."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / np.log2(pos + 2) for pos, x in enumerate(ranked[:k]) if x in relevant)
    ideal = sum(1.0 / np.log2(pos + 2) for pos in range(min(len(relevant), k)))
    return float(dcg / ideal)


def coverage(lists: Iterable[Sequence[Hashable]], n_items: int) -> float:
    """Share of the catalogue's `n_items` items that appear in at least one list."""
    shown: set[Hashable] = set()
    for items in lists:
        shown.update(items)
    return len(shown) / n_items if n_items else 0.0


def median_train_count(lists: Iterable[Sequence[Hashable]], train_counts: Mapping[Any, int] | np.ndarray) -> float:
    """Median number of training ratings of the recommended items, every recommendation counted once."""
    lookup: Any = train_counts  # a dict by id or an array by index: both are read with [x]
    counts = [int(lookup[x]) for items in lists for x in items]
    return float(np.median(counts)) if counts else float("nan")


def relevant_sets(users: np.ndarray, items: np.ndarray, ratings: np.ndarray,
                  threshold: float = RELEVANT_THRESHOLD) -> dict[int, set[int]]:
    """user → set of items rated ≥ threshold (users without one are left out)."""
    out: dict[int, set[int]] = {}
    for u, v in zip(users[ratings >= threshold].tolist(), items[ratings >= threshold].tolist()):
        out.setdefault(int(u), set()).add(int(v))
    return out


def evaluate_lists(lists: Mapping[Any, Sequence[Hashable]], relevant: Mapping[Any, set[Any]], *, n_items: int,
                   train_counts: Mapping[Any, int] | np.ndarray, ks: Sequence[int] = KS,
                   summary_k: int = SUMMARY_K) -> dict[str, float]:
    """Mean recall@K / NDCG@K over the users with a relevant item, plus coverage and median train count.

    A scored user without a list (e.g. no party answered) counts as all misses.
    """
    users = [u for u, rel in relevant.items() if rel]
    out: dict[str, float] = {"users": float(len(users))}
    for k in ks:
        out[f"ndcg@{k}"] = float(np.mean([ndcg_at_k(lists.get(u, ()), relevant[u], k) for u in users])) if users else 0.0
        out[f"recall@{k}"] = (float(np.mean([recall_at_k(lists.get(u, ()), relevant[u], k) for u in users]))
                              if users else 0.0)
    shown = [list(lists.get(u, ()))[:summary_k] for u in users]
    out["coverage"] = coverage(shown, n_items)
    out["median_train_count"] = median_train_count(shown, train_counts)
    return out


def top_k(scores: np.ndarray, seen: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k best unseen columns (ties → lower column first) and their scores.

    Args:
        scores: (U, M) float scores.
        seen: (U, M) bool, True where the item is not a candidate (the user's training items).
        k: list length (fewer columns when a row has fewer candidates: padded with -1 / -inf).
    Returns:
        (U, k) int64 columns and (U, k) float64 scores.
    """
    cols = top_k_columns(scores, seen, k)  # the one top-k: what the parties' validation ranking reports
    picked = np.take_along_axis(scores.astype(np.float64), np.maximum(cols, 0), axis=1)
    return cols, np.where(cols >= 0, picked, -np.inf)


def merge_top_k(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-party (items, scores) lists as the coordinator's fan-out does: stable sort by −score, first k.

    `parts` are in the fan-out's party order (sorted party ids) with items already global; ties keep
    that order, exactly as `services.coordinator.fanout.merge_recommendations` sorts.
    """
    items = np.concatenate([p[0] for p in parts], axis=1)
    scores = np.concatenate([p[1] for p in parts], axis=1)
    scores = np.where(items < 0, -np.inf, scores)
    order = merge_order(scores, k)
    return np.take_along_axis(items, order, axis=1), np.take_along_axis(scores, order, axis=1)


def merge_lists(answers: Sequence[Sequence[tuple[Hashable, float]]], k: int) -> list[Hashable]:
    """One user's merge of parties' (item, score) answers, in party order: the fan-out's rule on plain lists."""
    flat = [pair for answer in answers for pair in answer]
    order = merge_order(np.array([score for _, score in flat], dtype=np.float64), k)
    return [flat[i][0] for i in order.tolist()]


def lists_from_top(top: np.ndarray, users: Iterable[int]) -> dict[int, list[int]]:
    """user → list of columns (padding −1 dropped) for the given rows of a top-K matrix."""
    return {int(u): [int(x) for x in top[u] if x >= 0] for u in users}


def seen_matrix(n_users: int, n_items: int, *splits: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(U, M) bool marking the (user, item) pairs of the given (users, items) splits."""
    seen = np.zeros((n_users, n_items), dtype=bool)
    for users, items in splits:
        seen[users, items] = True
    return seen


def evaluate_scores(scores: np.ndarray, *, seen: np.ndarray, relevant: Mapping[int, set[int]],
                    train_counts: np.ndarray, ks: Sequence[int] = KS) -> dict[str, float]:
    """Full-ranking figures of a (U, M) score matrix: top-max(ks) of unseen items per user, then `evaluate_lists`."""
    top, _ = top_k(scores, seen, max(ks))
    return evaluate_lists(lists_from_top(top, relevant), relevant, n_items=scores.shape[1],
                          train_counts=train_counts, ks=ks)
