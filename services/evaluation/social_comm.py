"""Communication of protocol social-gnn from the real wire sizes of the fast Paillier path.

Message sizes are measured, not assumed: a real key of `key_bits`, a real encrypted chunk and a
real packed sandwich product (with the public bounds a FilmTrust session declares) give the bytes
of each message kind; the totals count those messages over the actual batch schedule of E epochs.
Two schedules: user batches (ours: each user once per epoch) and rating batches of 64 records (the
paper's Table 4 setting, where a batch's users are the distinct users of its 64 ratings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from services.crypto import dp, paillier
from services.crypto.paillier import PackedResult
from services.p4gcn.engines import sparse_rows
from services.p4gcn.graph import normalized_laplacian, public_l1_bound
from services.p4gcn.keys import PaillierSession
from services.p4gcn.trainer import SocialData, index_dataset
from services.protocol.social import encode_users, frame

PAPER_GB = 10.7  # P4GCN Table 4: FilmTrust, E = 5, B = 64


def _matrix_bytes(session: PaillierSession, rows: int, dim: int, bound: float) -> int:
    """Measured wire size of an rows x dim EncryptedMatrix (header + fixed-width ciphertexts)."""
    x = dp.clip_rows(np.random.default_rng(0).normal(size=(rows, dim)), bound)
    return len(session.encrypt(x, bound).to_bytes())


def _packed_bytes(session: PaillierSession, rows: int, dim: int, *, l1_bound: float, sigma: float) -> tuple[int, int]:
    """Measured (bytes, slots) of a packed product for a `rows`-user batch under the session's public bounds."""
    rng = np.random.default_rng(1)
    k = 8
    enc = session.encrypt(dp.clip_rows(rng.normal(size=(k, dim)), 1.0), 1.0)
    left = sp.random(rows, k, density=0.5, random_state=2, format="csr")
    left = sp.diags(l1_bound / np.maximum(np.abs(left).sum(axis=1).A.ravel(), 1e-9)) @ left * 0.999
    w = dp.clip_spectral(rng.normal(size=(dim, dim)), 1.0)
    noise_bound = 12.0 * sigma if sigma > 0 else 2.0**-8
    noise = np.clip(rng.normal(scale=max(sigma, 1e-6), size=(rows, dim)), -noise_bound, noise_bound)
    out = paillier.sandwich_product(session.ctx, sparse_rows(sp.csr_matrix(left)), enc, w, noise, pack=True,
                                    left_l1_bound=l1_bound, right_norm_bound=1.0, noise_bound=noise_bound)
    assert isinstance(out, PackedResult)
    return len(out.to_bytes()), out.spec.slots


def _schedules(data: SocialData, *, epochs: int, user_batch: int, rating_batch: int, seed: int) -> dict[str, list[int]]:
    """Users per batch over all epochs for both schedules."""
    rng = np.random.default_rng(seed)
    active = np.unique(data.train.users)
    per_user = [len(b) for _ in range(epochs) for b in np.array_split(rng.permutation(active),
                                                                        -(-active.size // user_batch))]
    per_rating = []
    for _ in range(epochs):
        order = rng.permutation(data.train.users.size)
        per_rating += [np.unique(data.train.users[order[i:i + rating_batch]]).size
                       for i in range(0, order.size, rating_batch)]
    return {"user_batches": per_user, "rating_batches": per_rating}


def communication_report(data: SocialData | str, *, key_bits: int = 2048, epochs: int = 5, dim: int = 64,
                         user_batch: int = 64, rating_batch: int = 64, epsilon: float = 15.0, delta: float = 1e-4,
                         chunk_rows: int = 256, seed: int = 0) -> dict[str, Any]:
    """GB exchanged between the two parties for `epochs` epochs, per schedule, with its breakdown."""
    if isinstance(data, str):
        from services.data.social import load_social

        data = index_dataset(load_social(data, seed=seed, ratios=(0.8, 0.1, 0.1)))
    session = PaillierSession.generate(key_bits)
    try:
        lap = normalized_laplacian(data.adjacency)
        l1 = public_l1_bound(lap)
        sigma = dp.calibrate_sigma(epsilon, delta, 2 * epochs) * dp.sensitivity(1.0)
        ct = (session.public_key.nsquare.bit_length() + 7) // 8
        head = _matrix_bytes(session, 1, dim, 1.0) - dim * ct  # fixed header of a matrix chunk
        n = data.n_users
        upload = -(-n // chunk_rows) * head + n * dim * ct
        measured, slots = _packed_bytes(session, user_batch, dim, l1_bound=l1, sigma=sigma)

        def packed(b: int) -> int:
            """12-byte layout + matrix header + ceil(b / S) * d ciphertexts (S = slots, capped at b)."""
            return 12 + head + -(-b // min(slots, b)) * dim * ct

        if packed(user_batch) != measured or packed(7) != _packed_bytes(session, 7, dim, l1_bound=l1, sigma=sigma)[0]:
            raise AssertionError("packed-result size formula disagrees with the measured message")
        out: dict[str, Any] = {"key_bits": key_bits, "ciphertext_bytes": ct, "epochs": epochs,
                               "x_upload_mb_per_epoch": round(upload / 1e6, 2), "paper_gb": PAPER_GB}
        for name, batches in _schedules(data, epochs=epochs, user_batch=user_batch, rating_batch=rating_batch,
                                        seed=seed).items():
            prod = 0
            for b in batches:
                prod += len(encode_users(np.arange(b))) + 2 * packed(b)
            grads = sum(len(frame(np.arange(b), b"")) + head + b * dim * ct for b in batches)
            updates = grads  # [dX_B] has the shape and framing of [G_B]
            total = epochs * upload + prod + grads + updates
            out[name] = {"batches": len(batches), "mean_users_per_batch": round(float(np.mean(batches)), 1),
                         "gb": round(total / 1e9, 3), "gb_without_row_updates": round((total - updates) / 1e9, 3),
                         "products_gb": round(prod / 1e9, 3), "gradients_gb": round(grads / 1e9, 3),
                         "x_uploads_gb": round(epochs * upload / 1e9, 3),
                         "fraction_of_paper": round(total / 1e9 / PAPER_GB, 3)}
        out["packing_slots"] = slots
        return out
    finally:
        session.close()

