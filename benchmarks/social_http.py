"""Encrypted P4GCN training on FilmTrust over real HTTP, against the plaintext engine in the same run.

A social party runs as its own process (`python -m party_api`, role social, FilmTrust's trust links
ingested through its API); the rating party trains in this process with a real Paillier key (2048
bits by default), uploading [X] each epoch and decrypting the packed sandwich products. The same
seed is then trained with the plaintext engine (same code path, same noise law). Prints one JSON
line: "rmse_encrypted", "rmse_plaintext_engine", "seconds_per_epoch", bytes each way, ε spent.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.localfed import ADMIN, COORD_TOKEN, party_proc
from services.data.filmtrust import load_filmtrust
from services.evaluation.social import FILMTRUST_MODEL, filmtrust_train_config, run_variant
from services.p4gcn.http import HttpSocialBackend
from services.p4gcn.keys import PaillierSession
from services.p4gcn.trainer import SocialTrainer, index_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/filmtrust")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_filmtrust(args.data, seed=args.seed, ratios=(0.8, 0.1, 0.1))
    data = index_dataset(ds)
    assert ds.social is not None
    cfg = filmtrust_train_config(seed=args.seed, epochs=args.epochs).model_copy(update={"patience": args.epochs})
    root = Path(tempfile.mkdtemp(prefix="fedrec-social-"))
    # The social party refuses keys below its floor (2048 by default); smoke runs with small keys lower it.
    extra = {"PARTY_ROLE": "social", "PARTY_PAILLIER_MIN_KEY_BITS": str(min(args.key_bits, 2048))}
    proc = party_proc("social", root, extra_env=extra).start(timeout=120)
    url = proc.url
    try:
        rows = [{"src_user_id": str(s), "dst_user_id": str(d), "weight": float(w)}
                for s, d, w in zip(ds.social.src, ds.social.dst, ds.social.weight)]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=600) as admin:
            admin.post("/v1/social-links", json={"rows": rows}).raise_for_status()
        t_key = time.perf_counter()
        keys = PaillierSession.generate(args.key_bits)
        key_seconds = time.perf_counter() - t_key
        try:
            backend = HttpSocialBackend(base_url=url, token=COORD_TOKEN, session=keys,
                                        user_ids=[str(u) for u in data.user_ids], epsilon=15.0, delta=1e-4,
                                        planned_epochs=args.epochs, dim=FILMTRUST_MODEL.dim)
            t0 = time.perf_counter()
            enc = SocialTrainer(data, model_config=FILMTRUST_MODEL, config=cfg, backend=backend).fit()
            seconds = time.perf_counter() - t0
        finally:
            keys.close()
    finally:
        proc.stop()
    plain = run_variant(data, variant="dp", model_config=FILMTRUST_MODEL, config=cfg)
    out = {"dataset": "filmtrust", "seed": args.seed, "epochs": args.epochs, "key_bits": args.key_bits,
           "users": int(data.n_users), "rmse_encrypted": round(enc.rmse, 4),
           "rmse_plaintext_engine": round(plain.rmse, 4), "valid_encrypted": [round(v, 4) for v in enc.valid_history],
           "valid_plaintext_engine": [round(v, 4) for v in plain.valid_history],
           "seconds_per_epoch": round(seconds / max(1, enc.epochs_run), 1), "seconds_keygen": round(key_seconds, 1),
           "bytes_to_social": enc.traffic.get("bytes_to_social"), "bytes_from_social": enc.traffic.get("bytes_from_social"),
           "epsilon_spent": enc.privacy.get("epsilon_spent"), "batches": enc.privacy.get("batches")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
