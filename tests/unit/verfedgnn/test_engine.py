"""PartyTrainer / CoordinatorTrainer contract on a tiny federation."""

from __future__ import annotations

import numpy as np
import pytest

from services.errors import ProtocolError
from services.verfedgnn.config import TrainConfig, shared_projection
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.types import PartyData, RatingTriples


def tiny_parties(seed: int = 0, n_users: int = 40, items: tuple[int, ...] = (12, 8)) -> list[PartyData]:
    rng = np.random.default_rng(seed)
    out = []
    for k, m in enumerate(items):
        def trip(n: int, m: int = m) -> RatingTriples:
            return RatingTriples(rng.integers(0, n_users, n).astype(np.int64), rng.integers(0, m, n).astype(np.int64),
                                 rng.integers(1, 6, n).astype(np.float32))
        out.append(PartyData(f"p{k}", n_users, m, sum(items), trip(150), trip(30), trip(30)))
    return out


def federation(config: TrainConfig, parties: list[PartyData]) -> InProcessFederation:
    coord = CoordinatorTrainer(config=config, n_users=parties[0].n_users,
                               item_counts={p.party_id: p.n_items for p in parties}, global_mean=3.0)
    return InProcessFederation(coordinator=coord, parties={p.party_id: PartyTrainer(config=config, data=p, seed=config.seed)
                                                           for p in parties})


@pytest.mark.parametrize("model", ["gcn", "gat", "ggnn", "mf"])
def test_round_shapes_and_quantized_uploads(model: str) -> None:
    cfg = TrainConfig(model=model, dim=4, layers=2, thd=1.0)
    parties = tiny_parties()
    party = PartyTrainer(config=cfg, data=parties[0], seed=0)
    coord = CoordinatorTrainer(config=cfg, n_users=40, item_counts={"p0": 12, "p1": 8})
    party.begin_round(round_index=0, public=coord.public_params())
    q = shared_projection(cfg, 40).q
    for k in range(cfg.layers if model != "mf" else 0):
        y = party.layer_projection(layer=k)
        assert y.shape == (q, 4) and y.dtype == np.float32
        party.receive_projection_sum(layer=k, others=np.zeros_like(y))
    up = party.finish_round()
    assert up.quantized and not up.dense
    for name, arr in up.quantized.items():
        assert set(np.unique(arr.signs)) <= {-1, 1} and arr.r == 3.0
        assert arr.shape == coord.public_params()[name].shape
    assert up.metrics["train"].count == 150
    metrics = coord.aggregate_and_step(uploads={"p0": up})
    assert metrics.participants == ["p0"] and np.isfinite(metrics.rmse["test"])


def test_out_of_order_calls_raise() -> None:
    cfg = TrainConfig(model="gcn", dim=4, layers=2)
    party = PartyTrainer(config=cfg, data=tiny_parties()[0], seed=0)
    with pytest.raises(ProtocolError):
        party.layer_projection(layer=0)
    coord = CoordinatorTrainer(config=cfg, n_users=40, item_counts={"p0": 12, "p1": 8})
    party.begin_round(round_index=0, public=coord.public_params())
    with pytest.raises(ProtocolError):
        party.layer_projection(layer=1)
    with pytest.raises(ProtocolError):
        party.finish_round()


def test_relay_sums_others_with_participation_scale() -> None:
    cfg = TrainConfig(model="gcn", dim=2)
    coord = CoordinatorTrainer(config=cfg, n_users=10, item_counts={"a": 10, "b": 20, "c": 30})
    ys = {"a": np.ones((2, 2), np.float32), "b": 2 * np.ones((2, 2), np.float32)}
    out = coord.relay(layer=0, projections=ys)
    # for a: others are b, c (50 items) but only b (20) took part → scale 50/20
    assert np.allclose(out["a"], 2 * 50 / 20)
    assert np.allclose(out["b"], 1 * 40 / 10)


def test_same_seed_is_bit_identical_and_resume_works() -> None:
    cfg = TrainConfig(model="gat", dim=4, layers=2, thd=1.0, alpha=0.5, seed=3)
    runs = []
    for _ in range(2):
        fed = federation(cfg, tiny_parties())
        runs.append([fed.run_round(t) for t in range(3)])
        runs[-1].append(fed.coordinator.public_params())
    assert [m.participants for m in runs[0][:3]] == [m.participants for m in runs[1][:3]]
    assert all(np.array_equal(runs[0][3][k], runs[1][3][k]) for k in runs[0][3])
    # resume: copy states into a fresh federation and continue identically
    fed_a = federation(cfg, tiny_parties())
    for t in range(2):
        fed_a.run_round(t)
    fed_b = federation(cfg, tiny_parties())
    fed_b.coordinator.load_state_dict(fed_a.coordinator.state_dict())
    for name, p in fed_a.parties.items():
        fed_b.parties[name].load_state_dict(p.state_dict())
    ma, mb = fed_a.run_round(2), fed_b.run_round(2)
    assert ma.rmse == mb.rmse
    assert all(np.array_equal(v, fed_b.coordinator.public_params()[k])
               for k, v in fed_a.coordinator.public_params().items())


def test_privacy_off_sends_dense_and_serving_model() -> None:
    cfg = TrainConfig(model="ggnn", dim=3, layers=1, use_projection=False, use_quantization=False, thd=1.0)
    fed = federation(cfg, tiny_parties())
    m = fed.run_round(0)
    assert m.upload_bytes > 0 and m.per_party == {}  # the round aggregates sums: no per-party figure
    served = fed.parties["p1"].serving_model()
    assert served["user_repr"].shape == (40, 3) and served["item_repr"].shape == (8, 3)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        TrainConfig(r=0.1, clip_bound=0.5)
    with pytest.raises(ValueError):
        TrainConfig(bogus=1)  # type: ignore[call-arg]


def test_cached_sparse_projection_matches_reference() -> None:
    import torch

    from services.crypto.projection import project, projection_spec, reconstruct
    from services.verfedgnn.config import sparse_phi

    spec = projection_spec(seed=4, n=50, ratio=0.2, kind="sparse")
    spec = type(spec)(seed=4, n=50, q=spec.q, kind="sparse", block=16)  # several column blocks
    phi, phi_t = sparse_phi(spec)
    x = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    y = torch.sparse.mm(phi, torch.from_numpy(x)).numpy()
    assert np.allclose(y, project(spec, x), atol=1e-5)
    assert np.allclose(torch.sparse.mm(phi_t, torch.from_numpy(y)).numpy(), reconstruct(spec, y), atol=1e-5)


def test_party_data_order_does_not_depend_on_row_order() -> None:
    """A database returns rows in any order; the engine's float sums must see one canonical order."""
    from services.verfedgnn.types import build_party_data

    rng = np.random.default_rng(3)
    pairs = rng.choice(20 * 30, size=150, replace=False)
    users = [f"u{p // 30}" for p in pairs]
    items = [f"i{p % 30}" for p in pairs]
    ratings = rng.integers(1, 6, size=150).astype(np.float32)
    codes = rng.integers(0, 3, size=150).astype(np.int8)
    uo, itemo = sorted(set(users)), sorted(set(items))
    a = build_party_data(party_id="p0", user_order=uo, item_order=itemo, users=users, items=items, ratings=ratings,
                         codes=codes, total_items=30, rating_min=1.0, rating_max=5.0)
    perm = rng.permutation(150)
    b = build_party_data(party_id="p0", user_order=uo, item_order=itemo, users=[users[k] for k in perm],
                         items=[items[k] for k in perm], ratings=ratings[perm], codes=codes[perm], total_items=30,
                         rating_min=1.0, rating_max=5.0)
    for split in ("train", "valid", "test"):
        x, y = a.split(split), b.split(split)
        assert len(x.users) > 0
        np.testing.assert_array_equal(x.users, y.users)
        np.testing.assert_array_equal(x.items, y.items)
        np.testing.assert_array_equal(x.ratings, y.ratings)
        assert np.all(np.diff(x.users * 1000 + x.items) > 0)


def test_grad_scale_quantizes_scaled_gradient_and_coordinator_unscales() -> None:
    from services.crypto.quantization import quantize_gradients, ternary_dequantize
    from services.verfedgnn.types import QuantizedArray, party_number
    parties = tiny_parties()
    coord = CoordinatorTrainer(config=TrainConfig(dim=4, layers=1, thd=1.0), n_users=40,
                               item_counts={"p0": 12, "p1": 8})

    def one_round(cfg: TrainConfig) -> tuple[PartyTrainer, object]:
        party = PartyTrainer(config=cfg, data=parties[0], seed=0)
        party.begin_round(round_index=0, public=coord.public_params())
        for k in range(cfg.layers):
            party.layer_projection(layer=k)
            party.receive_projection_sum(layer=k, others=np.zeros((40, 4), np.float32))
        return party, party.finish_round()

    base = dict(dim=4, layers=1, thd=1.0, use_projection=False)
    _, dense = one_round(TrainConfig(**base, use_quantization=False))
    scaled_cfg = TrainConfig(**base, grad_scale=0.05)
    _, up = one_round(scaled_cfg)
    rng = np.random.default_rng([0, party_number("p0"), 0])
    expect = quantize_gradients({k: v * np.float32(0.05) for k, v in dense.dense.items()}, clip_bound=0.5, r=3.0,
                                rng=rng)
    for k, q in up.quantized.items():
        assert isinstance(q, QuantizedArray)
        assert np.array_equal(q.indices, expect[k].indices) and np.array_equal(q.signs, expect[k].signs)
    decoded = CoordinatorTrainer(config=scaled_cfg, n_users=40, item_counts={"p0": 12, "p1": 8})._decode(up)
    for k, v in decoded.items():
        assert np.allclose(v, ternary_dequantize(expect[k]) / 0.05)


def test_reg_warmup_ramps_l2_terms() -> None:
    cfg = TrainConfig(reg_warmup=4)
    assert [cfg.reg_factor(t) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert TrainConfig().reg_factor(0) == 1.0
    base = dict(dim=4, layers=1, thd=1.0, reg=0.5, weight_decay=5.0, use_projection=False, use_quantization=False)
    losses = {}
    for warm in (0, 10):
        fed = federation(TrainConfig(**base, reg_warmup=warm), tiny_parties())
        losses[warm] = fed.run_round(0).loss
    assert losses[10] < losses[0]  # only 1/10 of the (positive) L2 terms in round 0
