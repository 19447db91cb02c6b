"""The attack suite on a tiny federation: it recovers interactions when nothing protects them, and fails under VerFedGNN."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from services.attacks.coordinator import coordinator_attack, knowledge_from_seed
from services.attacks.fake_users import FAKE_RATING, truth_pairs, with_fake_users
from services.attacks.scoring import popularity_guess, prf, random_guess_f1, top_k_pairs
from services.attacks.search import gcn_mean, nearest_match, subset_search
from services.attacks.suite import (
    coordinator_figures,
    party_attacks,
    protocol_settings,
    run_recorded,
    secure_coordinator_figures,
)
from tests.unit.attacks.tiny import N_USERS, TINY, VICTIM_ITEMS, tiny_federation


@pytest.fixture(scope="module")
def fed():  # type: ignore[no-untyped-def]
    return tiny_federation()


@pytest.fixture(scope="module")
def plain(fed):  # type: ignore[no-untyped-def]
    return party_attacks(fed, protocol="plain", base=TINY, share=1.0, observed_rounds=6)


def test_party_attacks_recover_everything_without_privacy(plain) -> None:  # type: ignore[no-untyped-def]
    """Exact aggregates and dense gradients: every (user, item) of the victim is found."""
    for attack in ("deanonymization", "gradient", "deanonymization_multiround"):
        assert plain[attack]["f1"] >= 0.95
        assert plain[attack]["f1"] > 3 * plain[attack]["popularity_f1"]


def test_party_attacks_fail_under_verfedgnn(fed, plain) -> None:  # type: ignore[no-untyped-def]
    """Same federation, projection + quantization on: no better than guessing popular items."""
    on = party_attacks(fed, protocol="verfedgnn", base=TINY, share=1.0, observed_rounds=6)
    for attack in ("deanonymization", "gradient", "deanonymization_multiround"):
        assert on[attack]["f1"] <= on[attack]["popularity_f1"] + 0.01
        assert on[attack]["f1"] < plain[attack]["f1"] / 4


def test_deanonymization_finds_graph_expansion_interactions_despite_ldp(fed) -> None:  # type: ignore[no-untyped-def]
    """FedPerGNN relays individual embeddings: exact matches (LDP and pseudo rows protect gradients only)."""
    got = party_attacks(fed, protocol="fedpergnn", base=TINY, share=1.0)
    assert got["deanonymization"]["precision"] == 1.0 and got["deanonymization"]["recall"] >= 0.95


def test_recall_is_bounded_by_the_attacked_share(fed) -> None:  # type: ignore[no-untyped-def]
    """Only items some fake user rated can be recognised."""
    got = party_attacks(fed, protocol="fedpergnn", base=TINY, share=0.5)
    assert got["deanonymization"]["precision"] == 1.0
    assert 0.3 <= got["deanonymization"]["recall"] <= 0.7


def test_coordinator_attack_with_and_without_protection(fed) -> None:  # type: ignore[no-untyped-def]
    """Exact aggregates give the interactions away; the projection lowers it; a coordinator without the seed learns nothing."""
    off = coordinator_figures(run_recorded(fed, protocol="plain", settings=protocol_settings("plain", TINY)))
    run = run_recorded(fed, protocol="verfedgnn", settings=protocol_settings("verfedgnn", TINY))
    on = coordinator_figures(run)
    assert off["f1"] >= 0.9
    assert on["f1"] < off["f1"] - 0.3
    # without the run seed (party-local secrets), Φ and E are guesses: a wrong seed is as good as any
    victim = fed.parties[1]
    truth = truth_pairs(victim, n_honest=N_USERS, thd=TINY.thd)
    wrong = knowledge_from_seed(TINY.model_copy(update={"seed": TINY.seed + 1}), n_users=N_USERS, party_id="party1",
                                n_items=VICTIM_ITEMS, train_count=len(victim.train), projected=True)
    users = np.arange(N_USERS)
    guessed = coordinator_attack(observed=run.log.projection(party_id="party1", round_index=0, layer=0),  # type: ignore[union-attr]
                                 knowledge=wrong, users=users)
    baseline = popularity_guess(truth, users=users, n_items=VICTIM_ITEMS, k=wrong.k)
    assert prf(guessed, truth)["f1"] <= prf(baseline, truth)["f1"]
    # the same through the suite's hook, as a secure-aggregation run would call it: only the sum is seen
    total = sum(run.log.projection(party_id=p, round_index=0, layer=0) for p in ("party0", "party1"))  # type: ignore[union-attr]
    summed = coordinator_figures(run, observed={"aggregate_sum": (total, True, True)}, knowledge=wrong)
    assert summed["best_message"] == "aggregate_sum" and summed["f1"] <= summed["popularity_f1"]


def test_fake_users_rate_one_victim_item_each(fed) -> None:  # type: ignore[no-untyped-def]
    """Fake users come after the honest ones, rate exactly one attacked item, and only at the victim."""
    attacked, fake = with_fake_users(fed, victim="party1", share=0.5, rng=np.random.default_rng(0))
    assert attacked.n_users == N_USERS + fake.users.size and fake.users.size == VICTIM_ITEMS // 2
    victim, other = attacked.parties[1], attacked.parties[0]
    mask = victim.train.users >= N_USERS
    assert np.array_equal(victim.train.users[mask], fake.users) and np.array_equal(victim.train.items[mask], fake.items)
    assert np.all(victim.train.ratings[mask] == FAKE_RATING) and not np.any(other.train.users >= N_USERS)
    assert len(set(fake.items.tolist())) == fake.items.size


def test_subset_search_finds_exact_sums() -> None:
    """A target built from 1–3 references is explained by exactly those references."""
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(40, 8)).astype(np.float32)
    subsets = [np.array([3]), np.array([5, 17]), np.array([0, 9, 33])]
    targets = np.stack([ref[s].sum(0) / np.sqrt(len(s)) for s in subsets])
    found = subset_search(targets, ref, combine=gcn_mean)
    assert [sorted(f.tolist()) for f in found] == [sorted(s.tolist()) for s in subsets]


def test_nearest_match_rejects_ambiguous_rows() -> None:
    """Exact copies match; a row with no counterpart stays unmatched."""
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(10, 6)).astype(np.float32)
    observed = np.vstack([ref[[4, 7]], rng.normal(size=(1, 6)).astype(np.float32)])
    assert nearest_match(observed, ref).tolist()[:2] == [4, 7]
    assert nearest_match(observed, ref)[2] == -1


def test_scoring() -> None:
    """Micro precision/recall/F1; popularity guesses follow the truth's item counts; random guesses' expected F1."""
    truth = {(0, 1), (0, 2), (1, 1)}
    assert prf({(0, 1), (1, 2)}, truth) == pytest.approx({"precision": 0.5, "recall": 1 / 3, "f1": 0.4, "guesses": 2})
    assert popularity_guess(truth, users=np.array([0, 1]), n_items=3, k=np.array([1, 2])) == {(0, 1), (1, 1), (1, 2)}
    # 2 random guesses each among 4 items: 1.5 expected hits of 4 guesses and 3 relevant pairs
    assert random_guess_f1(truth, users=np.array([0, 1]), n_items=4, k=2) == pytest.approx(3 / 7)
    scores = np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.3]])
    assert top_k_pairs(scores, np.array([5, 6]), np.array([2, 1])) == {(5, 1), (5, 2), (6, 0)}
    assert replace(knowledge_from_seed(TINY, n_users=N_USERS, party_id="party1", n_items=3, train_count=120,
                                       projected=False), phi=None).k == 2


def test_coordinator_of_a_secure_aggregation_run_is_no_better_than_popularity(fed) -> None:  # type: ignore[no-untyped-def]
    """The default coordinator run: masked messages, agreed Φ, party-local embeddings; only sums can be attacked."""
    got = secure_coordinator_figures(fed, base=TINY)
    assert set(got["by_message"]) == {"aggregate_sum", "gradient_sum"} and got["knows_seed"] is False
    assert got["f1"] <= got["popularity_f1"]
