"""Blocks of users and columns of Φ that distributed party training splits a party into add up to the whole."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

from services.crypto.projection import project, projection_spec, reconstruct
from services.verfedgnn.distributed import PhiColumns, shard_bounds, shard_data
from services.verfedgnn.types import PartyData, RatingTriples


@pytest.mark.parametrize("kind", ["gaussian", "sparse"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_column_blocks_of_phi_sum_to_the_projection_and_stack_to_the_reconstruction(kind: str, workers: int) -> None:
    spec = projection_spec(seed=7, n=20_000, ratio=0.1, kind=kind)  # several of Φ's 8192-column blocks
    spec = type(spec)(**{**spec.__dict__, "block": 3000})  # blocks that straddle the workers' boundaries
    rng = np.random.default_rng(0)
    x = rng.standard_normal((spec.n, 3)).astype(np.float32)
    y = rng.standard_normal((spec.q, 3)).astype(np.float32)
    total = torch.zeros(spec.q, 3)
    rows = []
    for w in range(workers):
        lo, hi = shard_bounds(spec.n, workers, w)
        cols = PhiColumns(spec, lo, hi)
        total += cols.project(torch.from_numpy(x[lo:hi]))
        rows.append(cols.reconstruct(torch.from_numpy(y)))
    np.testing.assert_allclose(total.numpy(), project(spec, x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(torch.cat(rows).numpy(), reconstruct(spec, y), rtol=1e-5, atol=1e-5)


def test_user_blocks_partition_every_split_with_local_indices() -> None:
    rng = np.random.default_rng(1)
    n = 101

    def triples(size: int) -> RatingTriples:
        users = np.sort(rng.integers(0, n, size))
        return RatingTriples(users, rng.integers(0, 30, size), rng.random(size).astype(np.float32))

    data = PartyData("p", n, 30, 60, triples(900), triples(100), triples(50))
    bounds = [shard_bounds(n, 4, w) for w in range(4)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n and all(a[1] == b[0] for a, b in pairwise(bounds))
    shards = [shard_data(data, lo, hi) for lo, hi in bounds]
    for name in ("train", "valid", "test"):
        whole = data.split(name)
        parts = [s.split(name) for s in shards]
        assert all(p.users.min(initial=0) >= 0 and p.users.max(initial=-1) < s.n_users for p, s in zip(parts, shards))
        np.testing.assert_array_equal(np.concatenate([p.users + lo for p, (lo, _) in zip(parts, bounds)]), whole.users)
        np.testing.assert_array_equal(np.concatenate([p.items for p in parts]), whole.items)
