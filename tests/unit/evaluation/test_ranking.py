"""Ranking metrics against hand-computed cases; top-K and the fan-out merge on small matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.metrics import merge_order, ndcg_sum, top_k_columns
from services.evaluation import ranking


def test_recall_and_ndcg_hand_computed() -> None:
    ranked = ["a", "b", "c", "d"]
    relevant = {"b", "d", "e"}
    # k=2: one hit at rank 2 over min(3, 2) = 2 relevant positions
    assert ranking.recall_at_k(ranked, relevant, 2) == pytest.approx(0.5)
    assert ranking.ndcg_at_k(ranked, relevant, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    # k=4: hits at ranks 2 and 4; ideal DCG over 3 positions
    assert ranking.recall_at_k(ranked, relevant, 4) == pytest.approx(2 / 3)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ranking.ndcg_at_k(ranked, relevant, 4) == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal)
    assert ranking.ndcg_at_k(ranked, relevant, 4) == pytest.approx(0.498189, abs=1e-6)
    # a perfect list scores 1, an empty relevant set 0
    assert ranking.ndcg_at_k(["b", "d", "e"], relevant, 10) == pytest.approx(1.0)
    assert ranking.recall_at_k(["b", "d", "e"], relevant, 10) == pytest.approx(1.0)
    assert ranking.ndcg_at_k(ranked, set(), 10) == 0.0


def test_coverage_and_median_train_count() -> None:
    lists = [[1, 2], [2, 3]]
    assert ranking.coverage(lists, 10) == pytest.approx(0.3)
    # counts of 1, 2, 2, 3 → 5, 1, 1, 9: median 3
    assert ranking.median_train_count(lists, {1: 5, 2: 1, 3: 9}) == 3.0
    assert ranking.median_train_count(lists, np.array([0, 5, 1, 9])) == 3.0


def test_evaluate_lists_means_over_users_with_a_relevant_item() -> None:
    relevant = {0: {1}, 1: {2, 3}, 2: set()}
    lists = {0: [1, 0], 1: [0, 2], 2: [1, 1]}
    out = ranking.evaluate_lists(lists, relevant, n_items=4, train_counts=np.array([7, 3, 2, 1]), ks=(1, 2),
                                 summary_k=2)
    assert out["users"] == 2
    assert out["recall@1"] == pytest.approx((1 + 0) / 2)
    assert out["recall@2"] == pytest.approx((1 + 1 / 2) / 2)
    assert out["ndcg@2"] == pytest.approx((1 + (1 / math.log2(3)) / (1 + 1 / math.log2(3))) / 2)
    assert out["coverage"] == pytest.approx(3 / 4)  # items 0, 1, 2 over users 0 and 1
    assert out["median_train_count"] == pytest.approx(5.0)  # counts 3, 7, 7, 2
    # a scored user without a list counts as misses
    assert ranking.evaluate_lists({0: [1]}, relevant, n_items=4, train_counts=np.ones(4), ks=(1,))["recall@1"] == 0.5


def test_top_k_excludes_seen_items_and_breaks_ties_by_index() -> None:
    scores = np.array([[0.1, 0.9, 0.5, 0.9], [1.0, 1.0, 0.0, -1.0]])
    seen = np.array([[False, False, False, True], [False, False, False, False]])
    cols, top = ranking.top_k(scores, seen, 2)
    assert cols.tolist() == [[1, 2], [0, 1]]
    assert top.tolist() == [[0.9, 0.5], [1.0, 1.0]]
    # fewer candidates than k: padded with -1
    cols, _ = ranking.top_k(scores, np.array([[True, True, True, False], [True] * 4]), 2)
    assert cols.tolist() == [[3, -1], [-1, -1]]


def test_merge_matches_the_fanout_rule() -> None:
    a = [("x", 3.0), ("y", 1.0)]
    b = [("w", 3.0), ("z", 2.0)]
    assert ranking.merge_lists([a, b], 3) == ["x", "w", "z"]  # tie: the earlier party first
    items, scores = ranking.merge_top_k([(np.array([[0, 1]]), np.array([[3.0, 1.0]])),
                                         (np.array([[2, -1]]), np.array([[2.0, -np.inf]]))], 3)
    assert items.tolist() == [[0, 2, 1]]
    assert scores.tolist() == [[3.0, 2.0, 1.0]]


def test_evaluate_scores_full_ranking() -> None:
    scores = np.array([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    seen = ranking.seen_matrix(2, 4, (np.array([0]), np.array([0])))
    relevant = ranking.relevant_sets(np.array([0, 1, 1]), np.array([1, 0, 3]), np.array([5.0, 4.0, 3.0]))
    assert relevant == {0: {1}, 1: {0}}
    out = ranking.evaluate_scores(scores, seen=seen, relevant=relevant, train_counts=np.arange(4), ks=(1, 4))
    assert out["recall@1"] == pytest.approx(0.5)  # user 0's first unseen is item 1; user 1's first is item 3
    assert out["ndcg@4"] == pytest.approx((1 + 1 / math.log2(5)) / 2)


@pytest.mark.parametrize("shape", [(40, 30), (7, 3), (25, 10), (5, 200)])
def test_partial_top_k_is_top_k_with_ties_and_short_rows(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[1])
    scores = rng.integers(0, 4, shape).astype(np.float32)  # many ties: order must be by column among equals
    seen = rng.random(shape) < 0.5
    seen[0] = True  # a row without candidates
    seen[1, 2:] = True  # a row with fewer than k candidates
    masked = np.where(seen, -np.inf, scores.astype(np.float64))
    full = np.argsort(-masked, axis=1, kind="stable")  # the definition: a full stable sort, lower column first
    for k in (1, 3, 10):
        k_eff = min(k, shape[1])
        want = np.full((shape[0], k), -1, dtype=np.int64)
        want[:, :k_eff] = np.where(np.isfinite(np.take_along_axis(masked, full[:, :k_eff], axis=1)),
                                   full[:, :k_eff], -1)
        np.testing.assert_array_equal(top_k_columns(scores, seen, k), want)
        cols, top = ranking.top_k(scores, seen, k)
        np.testing.assert_array_equal(cols, want)
        assert np.array_equal(top[cols < 0], np.full((cols < 0).sum(), -np.inf))
        np.testing.assert_array_equal(top[cols >= 0], np.take_along_axis(masked, np.maximum(want, 0), axis=1)[cols >= 0])


def test_ndcg_sum_is_the_sum_of_the_users_ndcg() -> None:
    rng = np.random.default_rng(5)
    scores, seen = rng.standard_normal((30, 50)), rng.random((30, 50)) < 0.3
    relevant = [set(rng.choice(50, 3, replace=False).tolist()) for _ in range(30)]
    top, _ = ranking.top_k(scores, seen, 10)
    expected = sum(ranking.ndcg_at_k([int(x) for x in row if x >= 0], rel, 10) for row, rel in zip(top, relevant))
    mask = np.zeros((30, 50), dtype=bool)
    for u, rel in enumerate(relevant[:-1]):  # the last user has no relevant item: counts 0
        mask[u, list(rel)] = True
    expected -= ranking.ndcg_at_k([int(x) for x in top[-1] if x >= 0], relevant[-1], 10)
    assert ndcg_sum(scores, seen, mask, 10) == pytest.approx(expected, rel=1e-12)


def test_the_one_merge_is_the_fan_outs_stable_sort_with_fallbacks_last() -> None:
    """`merge_order` (fan-out, experiments, plain lists) = Python's stable sort by (fallback, −score)."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, k = int(rng.integers(0, 30)), int(rng.integers(1, 12))
        scores = np.round(rng.normal(size=n), 1)  # many ties
        fallback = rng.random(n) < 0.3
        expected = sorted(range(n), key=lambda i: (bool(fallback[i]), -scores[i]))[:k]
        assert merge_order(scores, k, demoted=fallback).tolist() == expected
        assert merge_order(scores, k).tolist() == sorted(range(n), key=lambda i: -scores[i])[:k]
    rows = np.round(rng.normal(size=(5, 9)), 1)
    assert merge_order(rows, 4).tolist() == [sorted(range(9), key=lambda i: -r[i])[:4] for r in rows]
