"""The demo's RMSE table compares like with like: its pooled figure is the parties' served predictions pooled, so
it lies within the range of its parts; the demo binds fixed ports from --port-base."""

from __future__ import annotations

import math

import numpy as np

from cli.demo import demo_ports, part_rmse, pooled_rmse


def test_the_pooled_rmse_lies_within_the_range_of_its_parts() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        errors = {f"party{k}": (float(rng.uniform(0, 500)), int(rng.integers(1, 1000))) for k in range(3)}
        parts = [part_rmse(e) for e in errors.values()]
        assert min(parts) - 1e-12 <= pooled_rmse(errors) <= max(parts) + 1e-12
    # the pooled figure is one RMSE over every test rating, not a mean of the parts
    assert math.isclose(pooled_rmse({"a": (4.0, 1), "b": (0.0, 3)}), 1.0)
    assert math.isnan(pooled_rmse({}))


def test_the_demo_binds_ports_from_its_base() -> None:
    ports = demo_ports(21000, ["party0", "party1", "party2"])
    assert ports == {"coordinator": 21000, "party0": 21001, "party1": 21002, "party2": 21003,
                     "party0.federation": 21004, "party1.federation": 21005, "party2.federation": 21006}
    assert set(demo_ports(None, ["party0"]).values()) == {None}
