"""Multi-party ECDH PSI: correctness, aligned order, point validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from nacl import bindings as sodium

from services.crypto.psi import (
    PsiParty,
    blind,
    hash_to_group,
    intersect_tokens,
    new_secret,
    reblind,
    ring_owner,
    run_psi,
)
from services.errors import CryptoError

ORDER_TWO = bytes.fromhex("ec" + "ff" * 30 + "7f")  # (0, −1): a small-order point
IDENTITY = bytes([1]) + bytes(31)


def _sets() -> dict[str, list[str]]:
    rng = np.random.default_rng(0)
    common = [f"user-{i:03d}" for i in range(40)]
    sets = {}
    for name in ("alpha", "beta", "gamma"):
        own = [f"{name}-only-{i}" for i in range(15)]
        shared_pair = [f"pair-{i}" for i in range(10)] if name != "gamma" else []
        ids = common + own + shared_pair
        sets[name] = [ids[i] for i in rng.permutation(len(ids))]
    return sets


def test_three_parties_learn_exactly_the_intersection_in_one_order() -> None:
    sets = _sets()
    parties = {n: PsiParty.create(ids) for n, ids in sets.items()}
    finals, common = run_psi(parties)
    aligned = {n: parties[n].align(finals[n], common) for n in parties}
    truth = set.intersection(*(set(s) for s in sets.values()))
    assert len(common) == 40
    for ids in aligned.values():
        assert set(ids) == truth  # the pairwise-only "pair-*" ids are not revealed
    assert aligned["alpha"] == aligned["beta"] == aligned["gamma"]
    assert aligned["alpha"] != sorted(truth)  # the aligned order is pseudorandom, not by id


def test_outgoing_order_is_not_the_input_order() -> None:
    ids = [f"u{i:04d}" for i in range(200)]
    party = PsiParty.create(ids)
    assert list(party.ids) != ids and sorted(party.ids) == ids
    assert party.outgoing() == sorted(party.outgoing())


def test_blinding_commutes_and_hides_ids() -> None:
    a, b = new_secret(), new_secret()
    ids = ["x", "y", "z"]
    assert reblind(blind(ids, a), b) == reblind(blind(ids, b), a)
    assert blind(ids, a) != blind(ids, b)
    assert not set(blind(ids, a)) & {hash_to_group(i) for i in ids}


def test_fresh_secrets_give_unlinkable_tokens() -> None:
    sets = {"p": ["1", "2", "3"], "q": ["2", "3", "4"]}
    common = [run_psi({n: PsiParty.create(s) for n, s in sets.items()})[1] for _ in range(2)]
    assert len(common[0]) == len(common[1]) == 2 and not set(common[0]) & set(common[1])


def test_new_secret_is_a_nonzero_reduced_scalar() -> None:
    stream = itertools.chain([bytes(64)], itertools.repeat(bytes(range(64))))
    secret = new_secret(lambda n: next(stream)[:n])
    assert len(secret) == 32 and any(secret)
    assert secret == sodium.crypto_core_ed25519_scalar_reduce(bytes(range(64)))


@pytest.mark.parametrize(
    "point",
    [
        b"\x01" * 31,  # wrong length
        bytes(32),
        IDENTITY,
        ORDER_TWO,
        sodium.crypto_core_ed25519_add(hash_to_group("a"), ORDER_TWO),  # mixed order
        bytes.fromhex("ed" + "ff" * 30 + "7f"),  # y = p: non-canonical
    ],
)
def test_reblind_rejects_invalid_points(point: bytes) -> None:
    with pytest.raises(CryptoError):
        reblind([hash_to_group("ok"), point], new_secret())


def test_input_validation() -> None:
    with pytest.raises(ValueError):
        blind(["a", "a"], new_secret())
    with pytest.raises(CryptoError):
        blind(["a"], bytes(32))
    with pytest.raises(CryptoError):
        intersect_tokens({"p": [b"short"]})
    party = PsiParty.create(["a", "b"])
    with pytest.raises(CryptoError):
        party.align(party.outgoing(), [hash_to_group("zz")])
    with pytest.raises(CryptoError):
        party.align(party.outgoing()[:1], [])


def test_ring_schedule_visits_every_other_party_once() -> None:
    names = ["a", "b", "c", "d"]
    for owner in names:
        visitors = [r for s in range(1, 4) for r in names
                    if ring_owner(names, reblinder=r, step=s) == owner]
        assert sorted(visitors) == sorted(set(names) - {owner})
