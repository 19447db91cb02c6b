"""Scale benchmark: one federated VerFedGNN round at the size of the paper's Yelp run.

Defaults: 2 parties, ~2M users, 150k items, 7M ratings, D=20, K=2, sparse projection, privacy on.
Prints ONE JSON line with "seconds_per_round" (party-side compute per party in the last round, mean over parties),
"round_seconds" (whole round, parties run one after another in this process) and "peak_rss_gb".
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.data.synthetic import generate
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.federation.links import Handler, InProcessLink, Message, Step
from services.verfedgnn.rounds import VerFedGNNParty, run_round
from services.verfedgnn.types import PartyData, RatingTriples


class TimedLink(InProcessLink):
    """An in-process link that adds the seconds of each party-side step to its party's total."""

    def __init__(self, party_id: str, handler: Handler, seconds: dict[str, float]) -> None:
        super().__init__(party_id, handler)
        self.seconds = seconds

    def call(self, step: Step, message: Message) -> Message:
        """Hand the message to the party's handler, timed."""
        started = time.time()
        try:
            return super().call(step, message)
        finally:
            self.seconds[self.party_id] = self.seconds.get(self.party_id, 0.0) + time.time() - started


def party_data(users: np.ndarray, items: np.ndarray, ratings: np.ndarray, *, n_users: int, n_items: int,
               n_parties: int, rng: np.random.Generator) -> list[PartyData]:
    """Assign items to parties at random and cut the rating arrays (integer ids, no string tables)."""
    owner = rng.integers(0, n_parties, n_items)
    local = np.zeros(n_items, dtype=np.int64)
    counts = []
    for p in range(n_parties):
        mine = np.flatnonzero(owner == p)
        local[mine] = np.arange(mine.size)
        counts.append(mine.size)
    out = []
    for p in range(n_parties):
        m = owner[items] == p
        train = RatingTriples(users[m], local[items[m]], ratings[m])
        out.append(PartyData(f"party{p}", n_users, counts[p], n_items, train))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--users", type=int, default=1_990_000)
    ap.add_argument("--items", type=int, default=150_000)
    ap.add_argument("--ratings", type=int, default=6_990_000)
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="rounds to run; the last one is reported")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    ds = generate(args.users, args.items, args.ratings, seed=0, ratios=(1.0, 0.0, 0.0))
    users = ds.train.user_ids.astype(np.int64) - 1  # generator ids are str(k + 1)
    items = ds.train.item_ids.astype(np.int64) - 1
    ratings = ds.train.ratings.astype(np.float32)
    n_users = int(users.max()) + 1
    del ds
    parties = party_data(users, items, ratings, n_users=n_users, n_items=args.items, n_parties=args.parties,
                         rng=np.random.default_rng(1))
    gen_s = time.time() - t0
    cfg = TrainConfig(model=args.model, dim=args.dim, layers=2, activation="sigmoid", projection_kind="sparse",
                      q_ratio=0.2, r=3.0, thd=4.0, rounds=1)
    coord = CoordinatorTrainer(config=cfg, n_users=n_users, item_counts={p.party_id: p.n_items for p in parties},
                               global_mean=float(ratings.mean()))
    party_s: dict[str, float] = {}
    t_setup = time.time()
    trainers = {}
    for p in parties:
        t = time.time()
        trainers[p.party_id] = PartyTrainer(config=cfg, data=p, seed=0)
        party_s[p.party_id] = time.time() - t
    setup_s = time.time() - t_setup
    counts = coord.item_counts
    links = {name: TimedLink(name, VerFedGNNParty(trainer=trainer, item_counts=counts), party_s)
             for name, trainer in trainers.items()}
    round_times, first_round_party = [], {}
    for t in range(args.rounds):  # round 0 also pays one-off lazy initialisation; the last one is reported
        party_s.clear()
        t1 = time.time()
        outcome = run_round(coord=coord, links=links, round_index=t)  # parties one after another, no pool
        assert outcome.metrics is not None, outcome.failures
        metrics, chosen = outcome.metrics, outcome.participants
        round_times.append(time.time() - t1)
        if t == 0:
            first_round_party = dict(party_s)
    round_s = round_times[-1]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024  # KiB on Linux
    print(json.dumps({
        "users": n_users, "items": args.items, "ratings": int(ratings.size), "parties": args.parties,
        "dim": args.dim, "model": args.model,
        "seconds_per_round": round(float(np.mean(list(party_s.values()))), 2),
        "seconds_per_round_by_party": {k: round(v, 2) for k, v in party_s.items()},
        "round_seconds": round(round_s, 2), "rounds": args.rounds,
        "first_round_seconds_by_party": {k: round(v, 2) for k, v in first_round_party.items()}, "setup_seconds": round(setup_s, 2), "generate_seconds": round(gen_s, 2),
        "upload_bytes_per_party": int(metrics.upload_bytes / max(1, len(chosen))),
        "train_rmse": round(metrics.rmse["train"], 4), "peak_rss_gb": round(peak, 2)}))


if __name__ == "__main__":
    main()
