"""Scoring inferred interactions: precision / recall / F1 against the truth, and the popularity guess."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

Pairs = set[tuple[int, int]]


def prf(guessed: Iterable[tuple[int, int]], truth: Pairs) -> dict[str, float]:
    """Micro precision, recall and F1 of guessed (user, item) pairs (0 where undefined)."""
    guess = set(guessed)
    hits = len(guess & truth)
    precision = hits / len(guess) if guess else 0.0
    recall = hits / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "guesses": float(len(guess))}


def top_k_pairs(scores: np.ndarray, users: np.ndarray, k: int | np.ndarray) -> Pairs:
    """(user, item) pairs of the k highest-scoring items of each user (rows of `scores` = `users`; k per user or one k)."""
    ks = np.broadcast_to(np.clip(np.asarray(k, dtype=np.int64), 0, scores.shape[1]), (len(users),))
    width = int(ks.max()) if ks.size else 0
    if width == 0:
        return set()
    top = np.argpartition(-scores, width - 1, axis=1)[:, :width]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1), axis=1)
    return {(int(u), int(v)) for u, row, n in zip(users.tolist(), top, ks.tolist()) for v in row[:n].tolist()}


def guesses_per_user(pairs: Pairs, users: np.ndarray) -> np.ndarray:
    """How many guesses each of `users` received."""
    count = dict.fromkeys(users.tolist(), 0)
    for u, _ in pairs:
        if u in count:
            count[u] += 1
    return np.array([count[u] for u in users.tolist()], dtype=np.int64)


def popularity_guess(truth: Pairs, *, users: np.ndarray, n_items: int, k: int | np.ndarray) -> Pairs:
    """Guess, for every user, the victim's k most popular items (popularity taken from the truth itself).

    The reference an attack must beat to have learnt anything about individuals: it uses the
    victim's true item popularity, which none of the attackers is given. Give it the same number
    of guesses per user as the attack it is compared with.
    """
    counts = np.zeros(n_items, dtype=np.int64)
    for _, v in truth:
        counts[v] += 1
    ranked = np.argsort(-counts, kind="stable")
    ks = np.broadcast_to(np.clip(np.asarray(k, dtype=np.int64), 0, n_items), (len(users),))
    return {(int(u), int(v)) for u, n in zip(users.tolist(), ks.tolist()) for v in ranked[:n].tolist()}


def random_guess_f1(truth: Pairs, *, users: np.ndarray, n_items: int, k: int | np.ndarray) -> float:
    """Expected F1 of k uniformly random distinct items per user (user u hits |truth_u| / n_items per guess)."""
    ks = np.broadcast_to(np.asarray(k, dtype=np.float64), (len(users),))
    per_user = dict.fromkeys(users.tolist(), 0)
    for u, _ in truth:
        if u in per_user:
            per_user[u] += 1
    degree = np.array([per_user[u] for u in users.tolist()], dtype=np.float64)
    hits = float((ks * degree).sum()) / n_items
    guesses, relevant = float(ks.sum()), float(degree.sum())
    if hits == 0 or guesses == 0 or relevant == 0:
        return 0.0
    precision, recall = hits / guesses, hits / relevant
    return 2 * precision * recall / (precision + recall)
