"""P4GCN and LightGCN models: shapes, ranges, validated configs, gradients of the social path."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from models.lightgcn import LightGCNConfig, LightGCNRecommender, normalized_bipartite
from models.p4gcn import P4GCN, P4GCNConfig


def _adj(n_users: int = 5, n_items: int = 4) -> torch.Tensor:
    return normalized_bipartite(np.array([0, 1, 2, 3, 4, 0]), np.array([0, 1, 2, 3, 0, 1]), n_users, n_items)


def test_shapes_and_rating_range() -> None:
    model = P4GCN(config=P4GCNConfig(dim=8), n_users=5, n_items=4, adjacency=_adj())
    users, items = torch.tensor([0, 1, 4]), torch.tensor([0, 3, 2])
    xu, xv = model.gcn()
    assert xu.shape == (5, 8) and xv.shape == (4, 8)
    pred = model(users, items, torch.randn(5, 8) * 100)
    assert pred.shape == (3,) and bool(((pred >= 0.5) & (pred <= 4.0)).all())
    assert model(users, items, None).shape == (3,)
    base = LightGCNRecommender(config=LightGCNConfig(dim=8), n_users=5, n_items=4, adjacency=_adj())
    assert base(users, items).shape == (3,)
    assert "P4GCN" in repr(model) and "LightGCN" in repr(base)
    with pytest.raises(pydantic.ValidationError):
        P4GCNConfig(dim=8, unknown=1)  # type: ignore[call-arg]


def test_social_path_gradients_reach_w_p1() -> None:
    model = P4GCN(config=P4GCNConfig(dim=8), n_users=5, n_items=4, adjacency=_adj())
    y = torch.randn(5, 8, requires_grad=True)
    loss = model(torch.tensor([0, 1]), torch.tensor([0, 1]), y).sum()
    loss.backward()
    assert model.w_p1.weight.grad is not None and float(model.w_p1.weight.grad.abs().sum()) > 0
    assert y.grad is not None and float(y.grad[2:].abs().sum()) == 0.0  # only the batch users' rows
