"""Layers, estimators and models on tiny graphs (hand computations)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from models import graph as g
from models.metrics import mae, rmse
from models.mf import BiasedMF, MFConfig
from models.vertical import PartyForward, VerFedGNNConfig, build_private, build_public, predict
from tests.support.centralized import CentralGNN


def tiny() -> g.BipartiteGraph:
    # users 0,1,2 ; items 0,1 ; user 2 has no edge at this party
    return g.BipartiteGraph.from_edges(torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), n_users=3, n_items=2)


def test_gcn_estimator_matches_hand_computation() -> None:
    gr = tiny()
    w = g.gcn_edge_weight(gr, scale=2.0)  # E(N_u) = 2 · N_u^p: u0 → 4, u1 → 2; N_v: v0 → 2, v1 → 1
    expected = torch.tensor([1 / math.sqrt(4 * 2), 1 / math.sqrt(4 * 1), 1 / math.sqrt(2 * 2)])
    assert torch.allclose(w, expected)
    items = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    x = g.to_users(gr, items, w)
    assert torch.allclose(x, torch.tensor([[expected[0], expected[1]], [expected[2], 0.0], [0.0, 0.0]]))


def test_gat_estimator_matches_hand_computation() -> None:
    gr = tiny()
    self_logit = torch.tensor([0.5, -0.2, 0.1])
    edge_logit = torch.tensor([0.3, -1.0, 0.7])
    coef, self_coef = g.user_attention(gr, self_logit, edge_logit, scale=3.0)
    den0 = math.exp(0.5) + 3.0 * (math.exp(0.3) + math.exp(-1.0))
    den1 = math.exp(-0.2) + 3.0 * math.exp(0.7)
    assert torch.allclose(coef, torch.tensor([math.exp(0.3) / den0, math.exp(-1.0) / den0, math.exp(0.7) / den1]))
    assert torch.allclose(self_coef, torch.tensor([math.exp(0.5) / den0, math.exp(-0.2) / den1, 1.0]))
    # scale 1 is the exact softmax over N(u) ∪ {u}
    coef1, self1 = g.user_attention(gr, self_logit, edge_logit, scale=1.0)
    assert torch.allclose(coef1[:2].sum() + self1[0], torch.tensor(1.0))


def test_ggnn_contribution_is_weighted_local_mean() -> None:
    cfg = VerFedGNNConfig(kind="ggnn", dim=2, layers=1)
    pub = build_public(config=cfg, n_users=3, seed=0)
    prv = build_private(config=cfg, n_items=2, seed=1)
    fwd = PartyForward(public=pub, private=prv, graph=tiny(), scale=4.0)
    x = fwd.contribution(0)
    e = prv.item_emb.detach()
    assert torch.allclose(x[0], (e[0] + e[1]) / 2 / 4.0)
    assert torch.allclose(x[1], e[0] / 4.0)
    assert torch.allclose(x[2], torch.zeros(2))


@pytest.mark.parametrize("kind", ["gcn", "gat", "ggnn", "mf"])
def test_party_forward_shapes_and_gradients(kind: str) -> None:
    cfg = VerFedGNNConfig(kind=kind, dim=4, layers=2, activation="tanh")
    pub = build_public(config=cfg, n_users=3, seed=0, global_mean=3.0)
    prv = build_private(config=cfg, n_items=2, seed=1)
    fwd = PartyForward(public=pub, private=prv, graph=tiny(), scale=2.0)
    for k in range(cfg.n_layers):
        assert fwd.contribution(k).shape == (3, 4)
        fwd.advance(k, torch.randn(3, 4))
    h_u, h_v = fwd.final()
    assert h_u.shape == (3, 4) and h_v.shape == (2, 4)
    pred = predict(pub, prv, h_u, h_v, torch.tensor([0, 2]), torch.tensor([1, 0]))
    assert pred.shape == (2,)
    pred.sum().backward()
    assert pub.user_emb.grad is not None and prv.item_emb.grad is not None


def test_forward_rejects_out_of_order_layers() -> None:
    cfg = VerFedGNNConfig(kind="gcn", dim=2, layers=2)
    fwd = PartyForward(public=build_public(config=cfg, n_users=3, seed=0),
                       private=build_private(config=cfg, n_items=2, seed=0), graph=tiny(), scale=1.0)
    with pytest.raises(ValueError):
        fwd.contribution(1)
    with pytest.raises(ValueError):
        fwd.final()


@pytest.mark.parametrize(("kind", "transform"), [("gcn", True), ("gat", True), ("ggnn", True),
                                                ("gcn", False), ("gat", False)])
def test_centralized_equals_vertical_with_one_party(kind: str, transform: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    users = torch.randint(0, 6, (20,), generator=gen)
    items = torch.randint(0, 5, (20,), generator=gen)
    gr = g.BipartiteGraph.from_edges(users, items, n_users=6, n_items=5)
    cfg = VerFedGNNConfig(kind=kind, dim=3, layers=2, activation="sigmoid", transform=transform)
    pub = build_public(config=cfg, n_users=6, seed=0)
    prv = build_private(config=cfg, n_items=5, seed=1)
    central_u, central_v = CentralGNN(public=pub, items=prv, graph=gr)()
    fwd = PartyForward(public=pub, private=prv, graph=gr, scale=1.0)  # P = 1: E(N_u) = N_u
    for k in range(2):
        fwd.contribution(k)
        fwd.advance(k, torch.zeros(6, 3))  # no other party, privacy off
    h_u, h_v = fwd.final()
    assert torch.allclose(h_u, central_u, atol=1e-6) and torch.allclose(h_v, central_v, atol=1e-6)


def test_models_are_seeded_and_leave_global_rng_alone() -> None:
    cfg = VerFedGNNConfig(kind="gat", dim=4, layers=1)
    state = torch.random.get_rng_state()
    a, b = build_public(config=cfg, n_users=5, seed=7), build_public(config=cfg, n_users=5, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), na
    assert "PublicModel" in repr(a) and "GATLayer" in repr(a.layers[0])


def test_public_arrays_round_trip() -> None:
    cfg = VerFedGNNConfig(kind="ggnn", dim=3, layers=1)
    a, b = build_public(config=cfg, n_users=4, seed=1), build_public(config=cfg, n_users=4, seed=2)
    b.load_arrays(a.arrays())
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError):
        b.load_arrays({"user_emb": a.arrays()["user_emb"]})


def test_biased_mf_and_metrics() -> None:
    mf = BiasedMF(MFConfig(dim=2), n_users=3, n_items=2, global_mean=3.5, seed=0)
    pred = mf(torch.tensor([0, 1]), torch.tensor([1, 1]))
    assert pred.shape == (2,)
    assert "BiasedMF" in repr(mf)
    assert rmse(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 3.0])) == pytest.approx(math.sqrt(0.5))
    assert mae(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 5.0])) == pytest.approx(1.5)
    with pytest.raises(ValidationError):
        MFConfig(dim=2, unknown=1)  # type: ignore[call-arg]


def test_layers_without_transform_have_no_weight_matrix() -> None:
    with_w = build_public(config=VerFedGNNConfig(kind="gcn", dim=4, layers=2), n_users=3, seed=0)
    without = build_public(config=VerFedGNNConfig(kind="gcn", dim=4, layers=2, transform=False), n_users=3, seed=0)
    assert any(".weight" in k for k in with_w.arrays())
    assert not any(k.startswith("layers.") for k in without.arrays())
    # LightGCN-style GCN layer with identity activation: e^{k+1} = e^k + n^k exactly
    layer = without.layers[0]
    u, n = torch.randn(3, 4), torch.randn(3, 4)
    assert torch.equal(layer.update_users(u, n, None), torch.sigmoid(u + n))
