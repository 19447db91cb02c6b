"""Memory of whole-run DP (randomized response on a party's training matrix) on a large sparse party.

Prints one JSON line: for each ε, the ratings released, the peak traced memory (tracemalloc, numpy
buffers included), bytes per released rating and seconds; beside them, what listing the complement
of the matrix (the former sampler) would take. Fails (exit 1) past --max-bytes-per-released.
Usage: python -m benchmarks.dp_memory [--users 200000 --items 50000 --ratings 100000 --epsilon 12 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc

import numpy as np

from services.crypto.interaction_dp import randomize_interactions, rating_levels


def measure(*, users: int, items: int, ratings: int, epsilon: float, seed: int) -> dict[str, float]:
    """Randomize one synthetic party matrix at ε under tracemalloc."""
    rng = np.random.default_rng(seed)
    u, i = rng.integers(0, users, ratings), rng.integers(0, items, ratings)
    r = rng.integers(1, 6, ratings).astype(np.float32)
    tracemalloc.start()
    t0 = time.perf_counter()
    out = randomize_interactions(users=u, items=i, ratings=r, n_users=users, n_items=items,
                                 levels=rating_levels(1.0, 5.0), epsilon=epsilon, rng=rng)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    released = int(out[0].size)
    return {"epsilon": epsilon, "released": released, "peak_mb": round(peak / 2**20, 1),
            "bytes_per_released": round(peak / max(released, 1), 1), "seconds": round(seconds, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=200_000)
    ap.add_argument("--items", type=int, default=50_000)
    ap.add_argument("--ratings", type=int, default=100_000)
    ap.add_argument("--epsilon", type=float, nargs="+", default=[16.0, 12.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-bytes-per-released", type=float, default=200.0)
    a = ap.parse_args()
    runs = [measure(users=a.users, items=a.items, ratings=a.ratings, epsilon=e, seed=a.seed) for e in a.epsilon]
    ok = all(r["bytes_per_released"] <= a.max_bytes_per_released for r in runs)
    print(json.dumps({"users": a.users, "items": a.items, "ratings": a.ratings,
                      "complement_listing_gb": round(a.users * a.items * 8 / 2**30, 1), "runs": runs, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
