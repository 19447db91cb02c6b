"""Sandwich product [L M N + Z]: correctness vs plaintext and phe, packing bounds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from services.crypto.paillier import (
    PackedResult,
    PaillierContext,
    SparseRows,
    decrypt_result,
    djn_hs,
    encrypt_matrix,
    generate_keypair,
    phe_sandwich_reference,
    sandwich_product,
)
from services.crypto.paillier.packing import PackingSpec, pack_plain, spec_for, unpack_signed
from services.errors import CryptoError, ProtocolError

FRAC_ERR = 1e-4  # quantisation of L, N at 2^-16 and M at 2^-20 on these magnitudes


@pytest.fixture(scope="module")
def setup():
    pk, sk = generate_keypair(1024)
    ctx = PaillierContext(pk, djn_hs(sk), workers=2)
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (30, 6))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))  # rows clipped to norm 1
    dense = np.zeros((9, 30))
    for i in range(9):
        dense[i, rng.choice(30, 4, replace=False)] = rng.uniform(0, 1, 4)
    dense[3, 7] = -0.6  # a negative weight exercises the inverted-base branch
    right = rng.normal(0, 0.4, (6, 5))
    noise = rng.normal(0, 0.01, (9, 5))
    enc = encrypt_matrix(ctx, x, frac_bits=20, bound=1.0)
    yield SimpleNamespace(pk=pk, sk=sk, ctx=ctx, x=x, left=SparseRows.from_dense(dense),
                          dense=dense, right=right, noise=noise, enc=enc)
    ctx.close()


@pytest.mark.parametrize("pack", [True, False])
def test_matches_plaintext(setup, pack):
    s = setup
    result = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, pack=pack)
    assert isinstance(result, PackedResult) == pack
    out = decrypt_result(s.sk, result)
    assert np.abs(out - (s.dense @ s.x @ s.right + s.noise)).max() < FRAC_ERR


def test_unpacked_ciphertexts_decrypt_with_phe(setup):
    s = setup
    result = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, pack=False)
    assert result.exponent == -13
    phe_out = np.array([[s.sk.decrypt(c) for c in row] for row in result.to_phe()])
    assert np.array_equal(phe_out, decrypt_result(s.sk, result))


def test_matches_phe_reference_and_single_worker(setup):
    s = setup
    ref = phe_sandwich_reference(s.left, s.enc.to_phe(), s.right, s.noise, rows=[0, 3], cols=[1, 4])
    ref_values = np.array([[s.sk.decrypt(c) for c in row] for row in ref])
    serial = PaillierContext(s.pk, s.ctx.h_s, workers=1)
    fast = decrypt_result(s.sk, sandwich_product(serial, s.left, s.enc, s.right, s.noise))
    assert np.abs(fast[np.ix_([0, 3], [1, 4])] - ref_values).max() < FRAC_ERR


def test_outputs_are_rerandomised(setup):
    s = setup
    a = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise)
    b = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise)
    assert all(u != v for u, v in zip(a.data, b.data))
    assert np.array_equal(decrypt_result(s.sk, a), decrypt_result(s.sk, b))


def test_packed_bytes_round_trip(setup):
    s = setup
    result = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise)
    back = PackedResult.from_bytes(s.pk, result.to_bytes())
    assert back.spec == result.spec and back.data == result.data
    assert np.array_equal(decrypt_result(s.sk, back), decrypt_result(s.sk, result))


def test_declared_bounds_are_enforced(setup):
    s = setup
    with pytest.raises(CryptoError):
        sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, noise_bound=0.001)
    with pytest.raises(CryptoError):
        sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, left_l1_bound=0.5)
    with pytest.raises(CryptoError):
        sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, right_norm_bound=0.1)
    with pytest.raises(CryptoError):
        sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, slot_bits=20)
    ok = sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise, left_l1_bound=4.0, right_norm_bound=2.0,
                          noise_bound=0.1)
    assert np.abs(decrypt_result(s.sk, ok) - (s.dense @ s.x @ s.right + s.noise)).max() < FRAC_ERR


def test_slot_overflow_is_detected():
    n = (1 << 127) - 1
    spec = PackingSpec(8, 3)
    with pytest.raises(CryptoError):
        pack_plain([200, 0], spec, n)
    assert unpack_signed(pack_plain([-5, 127, -128 + 1], spec, n), spec, n, 3) == [-5, 127, -127]
    with pytest.raises(CryptoError):  # content above the declared slots
        unpack_signed(pack_plain([1, 2, 3], spec, n), spec, n, 2)
    with pytest.raises(CryptoError):
        spec_for(n, 1 << 200)
    assert spec_for(n, 100) == PackingSpec(8, 15)


def test_wrong_shapes_and_keys_rejected(setup):
    s = setup
    with pytest.raises(ProtocolError):
        sandwich_product(s.ctx, s.left, s.enc, s.right[:5], s.noise)
    with pytest.raises(ProtocolError):
        sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise[:4])
    with pytest.raises(ProtocolError):
        sandwich_product(s.ctx, SparseRows.from_dense(s.dense[:, :20]), s.enc, s.right, s.noise)
    with pytest.raises(ProtocolError):
        SparseRows(np.array([0, 2]), np.array([0, 40]), np.array([1.0, 1.0]), 30)
    other_pk, other_sk = generate_keypair(512)
    other = PaillierContext(other_pk, djn_hs(other_sk), workers=1)
    with pytest.raises(CryptoError):
        sandwich_product(other, s.left, s.enc, s.right, s.noise)
    with pytest.raises(CryptoError):
        decrypt_result(other_sk, sandwich_product(s.ctx, s.left, s.enc, s.right, s.noise))
