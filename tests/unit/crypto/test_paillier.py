"""Fast Paillier path: keys, DJN randomness, encryption, re-randomisation, wire format."""

from __future__ import annotations

import random

import gmpy2
import numpy as np
import phe.util
import pytest

from services.crypto import paillier
from services.crypto.paillier import (
    EncryptedMatrix,
    PaillierContext,
    decrypt_matrix,
    djn_hs,
    encrypt_matrix,
    generate_keypair,
    homomorphic_update,
    precompute_randomness,
    rerandomize,
)
from services.errors import CryptoError, ProtocolError


@pytest.fixture(scope="module")
def keys():
    pk, sk = generate_keypair(768)
    ctx = PaillierContext(pk, djn_hs(sk), workers=2)
    yield pk, sk, ctx
    ctx.close()


def test_requires_gmpy2(monkeypatch):
    monkeypatch.setattr(phe.util, "HAVE_GMP", False)
    with pytest.raises(CryptoError):
        paillier.require_gmp()


def test_hs_is_an_nth_residue(keys):
    pk, sk, ctx = keys
    lam = (sk.p - 1) * (sk.q - 1)
    assert gmpy2.powmod(ctx.h_s, lam, pk.nsquare) == 1  # n-th residues have order | lambda


def test_encrypt_is_phe_compatible(keys):
    _, sk, ctx = keys
    x = np.random.default_rng(1).uniform(-1, 1, (5, 7))
    enc = encrypt_matrix(ctx, x, frac_bits=20, bound=3.0)
    assert enc.exponent == -5 and enc.shape == (5, 7)
    phe_values = np.array([[sk.decrypt(c) for c in row] for row in enc.to_phe()])
    assert np.abs(phe_values - x).max() <= 2.0**-21
    assert np.array_equal(decrypt_matrix(sk, enc), phe_values)


def test_encrypt_rejects_values_above_public_bound(keys):
    _, _, ctx = keys
    with pytest.raises(CryptoError):
        encrypt_matrix(ctx, np.full((2, 2), 1.5), bound=1.0)
    assert encrypt_matrix(ctx, np.full((1, 2), 0.3)).bound == 0.5  # power-of-two of 0.42


def test_precomputed_randomness_and_injected_rng(keys):
    _, sk, ctx = keys
    seeded = random.Random(7).getrandbits  # deterministic source, tests only
    pool = precompute_randomness(ctx, 6, rng=seeded)
    x = np.array([[0.25, -0.5, 0.125], [1.0, 0.0, -1.0]])
    enc = encrypt_matrix(ctx, x, randomness=pool)
    assert pool == [] and np.allclose(decrypt_matrix(sk, enc), x)
    a = encrypt_matrix(ctx, x, rng=random.Random(3).getrandbits)
    b = encrypt_matrix(ctx, x, rng=random.Random(3).getrandbits)
    assert a.data == b.data  # the randomness really comes from the injected source


def test_rerandomize_changes_ciphertexts_not_plaintexts(keys):
    _, sk, ctx = keys
    x = np.random.default_rng(2).uniform(-1, 1, (3, 4))
    enc = encrypt_matrix(ctx, x)
    fresh = rerandomize(ctx, enc)
    assert all(a != b for a, b in zip(enc.data, fresh.data))
    assert np.array_equal(decrypt_matrix(sk, fresh), decrypt_matrix(sk, enc))


def test_bytes_round_trip_and_chunks(keys):
    pk, _, ctx = keys
    x = np.random.default_rng(3).uniform(-1, 1, (7, 3))
    enc = encrypt_matrix(ctx, x, bound=2.0)
    back = EncryptedMatrix.from_bytes(pk, enc.to_bytes(), expect_shape=(7, 3))
    assert back.data == enc.data and back.exponent == enc.exponent and back.bound == 2.0
    chunks = list(enc.iter_chunks(3))
    assert len(chunks) == 3
    whole = EncryptedMatrix.from_chunks(pk, chunks[::-1])
    assert whole.data == enc.data
    with pytest.raises(ProtocolError):
        EncryptedMatrix.from_chunks(pk, chunks[:2])
    with pytest.raises(ProtocolError):
        EncryptedMatrix.from_bytes(pk, enc.to_bytes(), expect_shape=(3, 7))


def test_tampered_ciphertexts_rejected(keys):
    pk, _, ctx = keys
    enc = encrypt_matrix(ctx, np.zeros((2, 2)))
    blob = bytearray(enc.to_bytes())
    width = (pk.nsquare.bit_length() + 7) // 8
    blob[-width:] = b"\xff" * width  # >= n^2
    with pytest.raises(CryptoError):
        EncryptedMatrix.from_bytes(pk, bytes(blob))
    blob[-width:] = b"\x00" * width  # zero
    with pytest.raises(CryptoError):
        EncryptedMatrix.from_bytes(pk, bytes(blob))
    with pytest.raises(ProtocolError):
        EncryptedMatrix.from_bytes(pk, bytes(blob[:-1]))
    bad = EncryptedMatrix(pk, 1, 2, 0, [pk.n, 5])
    with pytest.raises(CryptoError):
        bad.validate(check_gcd=True)
    with pytest.raises(ProtocolError):
        EncryptedMatrix(pk, 2, 2, 0, enc.data[:3])
    other, _ = generate_keypair(512)
    with pytest.raises(CryptoError):
        EncryptedMatrix.from_bytes(other, enc.to_bytes())


def test_homomorphic_update(keys):
    _, sk, ctx = keys
    rng = np.random.default_rng(4)
    x, delta = rng.uniform(-0.25, 0.25, (6, 3)), rng.uniform(-0.05, 0.05, (2, 3))
    enc = encrypt_matrix(ctx, x, bound=0.5)
    upd = homomorphic_update(enc, [4, 1], encrypt_matrix(ctx, delta, bound=0.125), bound=1.0)
    want = x.copy()
    want[[4, 1]] += delta
    assert np.allclose(decrypt_matrix(sk, upd), want, atol=2.0**-19) and upd.bound == 1.0
    with pytest.raises(ProtocolError):
        homomorphic_update(enc, [1], encrypt_matrix(ctx, delta))
    with pytest.raises(ProtocolError):
        homomorphic_update(enc, [1, 2], encrypt_matrix(ctx, delta, frac_bits=16))
