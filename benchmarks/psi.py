"""PSI blinding throughput; prints one JSON line.  Usage: python -m benchmarks.psi [--ids 10000]"""

from __future__ import annotations

import argparse
import json
import time

from services.crypto.psi import blind, new_secret, reblind


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=10_000)
    n = ap.parse_args().ids
    ids = [f"user-{i}" for i in range(n)]
    secret = new_secret()
    t0 = time.perf_counter()
    points = blind(ids, secret)
    t1 = time.perf_counter()
    reblind(points, new_secret())
    t2 = time.perf_counter()
    print(json.dumps({"ids": n, "blind_ids_per_s": round(n / (t1 - t0)),
                      "reblind_points_per_s": round(n / (t2 - t1))}))


if __name__ == "__main__":
    main()
