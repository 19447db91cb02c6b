"""Side information in the VerFedGNN party: attribute nodes and enriched items that stay at the party."""

from __future__ import annotations

import numpy as np
import torch

from services.data.features import FeatureRow
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.features import attach_features
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import PartyData, build_party_data

N, P, M = 30, 6, 20
ALIGNED = [f"a{k:02d}" for k in range(N)]
ITEMS = [f"i{v:02d}" for v in range(M)]
CONFIG = TrainConfig(dim=4, layers=2, q_ratio=0.3, seed=3, rank_weight=1.0, rank_dims=1, reg=0.1,
                     weight_decay=1.0, reg_bias=0.1, thd=3.0, rating_levels=2)


def _data(party: str = "p0") -> PartyData:
    rng = np.random.default_rng(7)
    users = ALIGNED + [f"own{k}" for k in range(P)]
    rows = sorted({(u, f"i{v:02d}") for u in users for v in rng.choice(M, size=7, replace=False).tolist()})
    codes = rng.choice([0, 0, 0, 0, 1, 2], size=len(rows)).astype(np.int8)
    return build_party_data(party_id=party, user_order=ALIGNED, item_order=ITEMS, users=[u for u, _ in rows],
                            items=[i for _, i in rows], ratings=rng.integers(1, 6, size=len(rows)).astype(np.float32),
                            codes=codes, total_items=2 * M, rating_min=1.0, rating_max=5.0, include_private=True)


def _features(data: PartyData) -> PartyData:
    users = [FeatureRow(u, "job", text=["a", "b", "c"][k % 3]) for k, u in enumerate(ALIGNED + data.private_user_ids)]
    users += [FeatureRow(u, "age", number=float(k)) for k, u in enumerate(ALIGNED)]
    items = [FeatureRow(i, "genre", text=g) for k, i in enumerate(ITEMS) for g in (["x", "y"] if k % 2 else ["x"])]
    return attach_features(data, user_order=ALIGNED, item_order=ITEMS, users=users, items=items)


def _trainer(data: PartyData) -> PartyTrainer:
    return PartyTrainer(config=CONFIG, data=data, seed=3, local_seed=11)


def _fed(first: PartyData) -> InProcessFederation:
    other = _data("p1")
    coord = CoordinatorTrainer(config=CONFIG, n_users=N, global_mean=3.0, item_counts={"p0": M, "p1": M})
    return InProcessFederation(coordinator=coord, parties={"p0": _trainer(first), "p1": _trainer(other)})


def test_attribute_nodes_change_the_model_but_no_message_shape() -> None:
    data = _features(_data())
    assert data.user_features is not None and data.user_features.n_tokens == 3 + 4  # job values, age bins
    assert data.item_features is not None and data.item_features.n_tokens == 2
    plain, rich = _fed(_data()), _fed(data)
    for fed in (plain, rich):
        for t in range(3):
            fed.run_round(t)
    public = plain.coordinator.public.arrays()
    shapes = {}
    for name, fed in (("plain", plain), ("rich", rich)):
        trainer = fed.parties["p0"]
        assert isinstance(trainer, PartyTrainer)
        trainer.begin_round(round_index=3, public=public)
        shapes[name] = trainer.layer_projection(layer=0)
        served = trainer.serving_model()
        assert served["item_repr"].shape[0] == M and served["user_repr"].shape[0] == N + P
    assert shapes["plain"].shape == shapes["rich"].shape  # q x D either way: no per-attribute axis
    assert not np.allclose(shapes["plain"], shapes["rich"])  # the attributes reach the users' contribution


def test_attribute_rows_train_and_survive_a_checkpoint() -> None:
    fed = _fed(_features(_data()))
    trainer = fed.parties["p0"]
    assert isinstance(trainer, PartyTrainer) and trainer.features is not None
    before = {k: v.detach().clone() for k, v in trainer.features.state_dict().items()}
    for t in range(2):
        fed.run_round(t)
    after = trainer.features.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)  # both tables get gradients
    state = load_state(dump_state(trainer.state_dict()))
    copy = _trainer(_features(_data()))
    copy.load_state_dict(state)
    public = fed.coordinator.public.arrays()
    for t in (trainer, copy):
        t.begin_round(round_index=2, public=public)
    assert np.array_equal(trainer.layer_projection(layer=0), copy.layer_projection(layer=0))


def test_a_party_without_features_trains_as_before() -> None:
    data = _data()
    assert _trainer(data).features is None and _trainer(data).n_graph_items == M
