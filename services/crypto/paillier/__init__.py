"""Paillier on phe keys, fast path: the encrypted sandwich products of P4GCN (SPEC §3).

Modules, each importing only the ones listed before it (never this facade):
  fixed_point  real <-> integer at scale 2^f, phe's base-16 exponents
  packing      signed slots of several integers in one plaintext
  kernels      raw mpz inner loops (encrypt, re-randomise, pack, right product) + worker pool
  matrix       EncryptedMatrix, PackedResult, SparseRows and their binary wire format (packing)
  context      keys, DJN h_s, PaillierContext, encrypt / decrypt / update matrices
               (fixed_point, packing, kernels, matrix)
  sandwich     [L M N + Z] on ciphertexts (fixed_point, packing, matrix, context)
  reference    the same product with plain phe floats: tests and the benchmark baseline (matrix)
No file I/O: key files are the key owner's business (services.p4gcn.keys).

Usage (A = key owner / rating party, B = social party)::

    pk, sk = generate_keypair(2048)                  # A
    h_s = djn_hs(sk)                                 # A publishes (pk.n, h_s)
    ctx = PaillierContext(pk, h_s)                   # both; ctx.close() at the end
    enc_x = encrypt_matrix(ctx, x, frac_bits=20, bound=1.0)     # A, once per epoch
    res = sandwich_product(ctx, l_b, enc_x, w_p2, noise,        # B, per batch
                           left_l1_bound=4.0, right_norm_bound=1.0, noise_bound=0.1)
    j_f = decrypt_result(sk, res)                    # A: L_B X W_P2 + noise
    enc_g = encrypt_matrix(ctx, grad_y_b, frac_bits=20)         # A, per batch
    res = sandwich_product(ctx, l_bb, enc_g, w_p2.T, noise2, ...)  # B
    enc_x = homomorphic_update(enc_x, batch, encrypt_matrix(ctx, dx_b), bound=1.0)  # B
"""

from services.crypto.paillier.context import (
    FastPublicKey,
    PaillierContext,
    Rng,
    decrypt_matrix,
    decrypt_result,
    djn_hs,
    encrypt_matrix,
    generate_keypair,
    homomorphic_update,
    precompute_randomness,
    raw_decrypt_many,
    require_gmp,
    rerandomize,
)
from services.crypto.paillier.matrix import EncryptedMatrix, PackedResult, SparseRows
from services.crypto.paillier.reference import phe_sandwich_reference
from services.crypto.paillier.sandwich import sandwich_product

__all__ = [
    "EncryptedMatrix",
    "FastPublicKey",
    "PackedResult",
    "PaillierContext",
    "Rng",
    "SparseRows",
    "decrypt_matrix",
    "decrypt_result",
    "djn_hs",
    "encrypt_matrix",
    "generate_keypair",
    "homomorphic_update",
    "phe_sandwich_reference",
    "precompute_randomness",
    "raw_decrypt_many",
    "require_gmp",
    "rerandomize",
    "sandwich_product",
]
