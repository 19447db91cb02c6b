"""Training-state memory of one party at W = 1 and per rank at W = 2 (PARTY_TRAIN_WORKERS), at the scale size.

One party of benchmarks/scale.py's federation (defaults: 1.2M users, 75k of the 150k items, 3.5M ratings,
D = 20, K = 2, sparse Φ with q = 0.2 N) trains one round with the coordinator's initial public
parameters: first as one PartyTrainer, then as two torch.distributed ranks (this process is rank 0,
one spawned worker is rank 1). "Training state" is every tensor the trainer holds after the round
(parameters and gradients, optimizer state, graph and its cached CSR matrices, Φ, ratings, counts, the
last forward's h_u and h_v) plus the bytes autograd saved for the backward of the round's forward.
The party's loaded data outside the trainer (the federation process keeps it at any W) is not counted.

Prints ONE JSON line: {"users", "ratings", "w1_bytes", "w2_bytes_by_rank", "w2_max_over_w1", ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.vertical import build_public
from services.data.synthetic import generate
from services.verfedgnn.config import TrainConfig, model_config, shared_projection
from services.verfedgnn.distributed import (
    Cluster,
    DistributedPartyTrainer,
    count_saved,
    trainer_bytes,
)
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.types import PartyData, RatingTriples


def _round(trainer: PartyTrainer | DistributedPartyTrainer, public: dict[str, np.ndarray], layers: int,
           q: int, dim: int) -> float:
    """One round's steps with the others' projected sum taken as zero (same shapes and work)."""
    started = time.perf_counter()
    if isinstance(trainer, DistributedPartyTrainer):
        trainer.begin_round(round_index=0, public=public, measure=True)
    else:
        trainer.begin_round(round_index=0, public=public)
    for k in range(layers):
        trainer.layer_projection(layer=k)
        trainer.receive_projection_sum(layer=k, others=np.zeros((q, dim), np.float32))
    trainer.finish_round()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--users", type=int, default=1_200_000)
    ap.add_argument("--items", type=int, default=75_000, help="this party's items")
    ap.add_argument("--total-items", type=int, default=150_000, help="items of every party (public ΣM)")
    ap.add_argument("--ratings", type=int, default=3_500_000)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = generate(args.users, args.items, args.ratings, seed=0, ratios=(1.0, 0.0, 0.0))
    users = ds.train.user_ids.astype(np.int64) - 1  # generator ids are str(k + 1)
    items = ds.train.item_ids.astype(np.int64) - 1
    ratings = ds.train.ratings.astype(np.float32)
    del ds
    order = np.lexsort((items, users))  # as build_party_data sorts them
    n_users = int(users.max()) + 1
    data = PartyData("party0", n_users, args.items, args.total_items,
                     RatingTriples(users[order], items[order], ratings[order]))
    del users, items, ratings, order
    cfg = TrainConfig(model="gcn", dim=args.dim, layers=2, activation="sigmoid", projection_kind="sparse",
                      q_ratio=0.2, r=3.0, thd=4.0, rounds=1)
    public = build_public(config=model_config(cfg), n_users=n_users, seed=0, global_mean=3.5).arrays()
    q = shared_projection(cfg, n_users).q

    one = PartyTrainer(config=cfg, data=data, seed=0)
    with count_saved(one):
        w1_seconds = _round(one, public, cfg.layers, q, args.dim)
    w1 = trainer_bytes(one)
    del one

    dist = DistributedPartyTrainer(config=cfg, data=data, seed=0, local_seed=None,
                                   cluster=Cluster(workers=args.workers, timeout_s=1800))
    try:
        w2_seconds = _round(dist, public, cfg.layers, q, args.dim)
        w2 = dist.measure()
        hwm = {}
        for pid in dist.worker_pids:
            status = Path(f"/proc/{pid}/status").read_text()
            hwm[str(pid)] = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1]) * 1024
    finally:
        dist.close()
    gb = 1 << 30
    print(json.dumps({
        "users": n_users, "items": args.items, "ratings": len(data.train), "dim": args.dim, "workers": args.workers,
        "w1_bytes": w1, "w2_bytes_by_rank": w2,
        "w1_gb": round(w1["total_bytes"] / gb, 3),
        "w2_gb_by_rank": [round(r["total_bytes"] / gb, 3) for r in w2],
        "w2_max_over_w1": round(max(r["total_bytes"] for r in w2) / w1["total_bytes"], 3),
        "w2_worker_peak_rss_gb": [round(v / gb, 3) for v in hwm.values()],
        "round_seconds": {"w1": round(w1_seconds, 2), f"w{args.workers}": round(w2_seconds, 2)},
    }))


if __name__ == "__main__":
    main()
