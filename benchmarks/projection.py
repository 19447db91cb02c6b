"""Random-projection and ternary-upload figures; prints one JSON line.

Usage: python -m benchmarks.projection [--n 2000000 --q 400000 --d 20]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from services.crypto.projection import ProjectionSpec, project, projection_spec, reconstruct
from services.crypto.quantization import encode_ternary, quantize_gradients


def _round_trip(spec: ProjectionSpec, d: int) -> dict[str, float]:
    x = np.random.default_rng(0).standard_normal((spec.n, d)).astype(np.float32)
    t0 = time.perf_counter()
    y = project(spec, x)
    t1 = time.perf_counter()
    x_hat = reconstruct(spec, y)
    t2 = time.perf_counter()
    err = float(np.sum((x_hat - x).astype(np.float64) ** 2) / np.sum(x.astype(np.float64) ** 2))
    return {"project_s": round(t1 - t0, 3), "reconstruct_s": round(t2 - t1, 3),
            "rel_sq_error": round(err, 3), "theory_n_plus_1_over_q": round((spec.n + 1) / spec.q, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--q", type=int, default=400_000)
    ap.add_argument("--d", type=int, default=20)
    args = ap.parse_args()
    sparse = ProjectionSpec(seed=1, n=args.n, q=args.q, kind="sparse")
    gauss = projection_spec(seed=1, n=6040, ratio=0.2)  # ML-1M users, q = N/5
    grads = {"e0": np.random.default_rng(1).normal(0, 0.05, size=(6040, 6))}
    up = quantize_gradients(grads, r=3.0, rng=np.random.default_rng(2))["e0"]
    print(json.dumps({
        "sparse": {"n": args.n, "q": args.q, "d": args.d, **_round_trip(sparse, args.d)},
        "gaussian_ml1m": {"n": gauss.n, "q": gauss.q, "d": 6, **_round_trip(gauss, 6)},
        "ternary_e0_ml1m": {"nnz": int(up.indices.size), "bytes": len(encode_ternary(up)),
                            "dense_float32_bytes": 6040 * 6 * 4},
    }))


if __name__ == "__main__":
    main()
