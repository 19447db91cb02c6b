"""The in-party softmax ranking loss: hand-computed value, training items are never negatives, privacy unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.vertical import softmax_rank_loss
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.party import PartyTrainer
from tests.unit.verfedgnn.test_engine import federation, tiny_parties


def test_softmax_rank_loss_hand_computed() -> None:
    scores = torch.tensor([[1.0, 2.0, 0.0, 3.0]])
    seen = torch.tensor([[True, False, False, True]])
    # positive item 0: softmax over {0} ∪ unseen {1, 2}; item 3 is seen, so never a negative
    loss = softmax_rank_loss(scores, seen, torch.tensor([0]), torch.tensor([0]))
    assert float(loss) == pytest.approx(math.log(math.e + math.e ** 2 + 1) - 1.0)


def test_training_items_get_no_gradient_as_negatives() -> None:
    scores = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 1.0, 2.0, 3.0]], requires_grad=True)
    seen = torch.tensor([[True, True, False, False], [False, False, True, False]])
    softmax_rank_loss(scores, seen, torch.tensor([0, 1]), torch.tensor([0, 2])).backward()
    assert scores.grad is not None
    # user 0's training item 1 is not its positive here and is seen: no push-down from user 0's positive
    assert float(scores.grad[0, 1]) == 0.0
    assert float(scores.grad[0, 0]) < 0 and float(scores.grad[0, 2]) > 0 and float(scores.grad[0, 3]) > 0


def test_party_negatives_are_exactly_the_items_outside_training() -> None:
    cfg = TrainConfig(dim=4, layers=2, thd=1.0, rank_weight=1.0, rank_dims=1)
    data = tiny_parties()[0]
    trainer = PartyTrainer(config=cfg, data=data, seed=0)
    assert trainer._rank is not None
    users, seen, rows, items = trainer._rank
    pairs = {(int(users[r]), int(v)) for r, v in zip(rows.tolist(), items.tolist())}
    assert pairs == set(zip(data.train.users.tolist(), data.train.items.tolist()))
    marked = {(int(users[r]), int(v)) for r, v in zip(*np.nonzero(seen.numpy()))}
    assert marked == pairs  # every training pair masked out of the negatives, nothing else
    held = set(zip(data.test.users.tolist(), data.test.items.tolist())) - pairs
    assert held and not held & marked  # held-out ratings stay candidates, as at serving time


def test_ranking_run_adds_only_private_parameters() -> None:
    cfg = TrainConfig(dim=4, layers=2, thd=1.0, rank_weight=1.0, rank_dims=1, rounds=3)
    plain = TrainConfig(dim=4, layers=2, thd=1.0, rounds=3)
    parties = tiny_parties()
    fed = federation(cfg, parties)
    assert set(fed.coordinator.public_params()) == set(federation(plain, parties).coordinator.public_params())
    for t in range(3):
        m = fed.run_round(t)
        assert math.isfinite(m.loss)
    trainer = fed.parties["p0"]
    served = trainer.serving_model()
    assert served["rank_bias"].shape == (parties[0].n_items,) and int(served["rating_dim"]) == 3
    assert trainer.private.rank_bias is not None and float(trainer.private.rank_bias.detach().abs().sum()) > 0


def test_dgrec_uploads_one_code_per_element_decoded_without_bias() -> None:
    cfg = TrainConfig(dim=4, layers=2, thd=1.0, rank_weight=1.0, rank_dims=1, gradient_protection="dgrec",
                      dgrec_delta=0.1, dgrec_strength=1.0)
    fed = federation(cfg, tiny_parties())
    trainer = fed.parties["p0"]
    trainer.begin_round(round_index=0, public=fed.coordinator.public_params())
    for k in range(cfg.layers):
        y = trainer.layer_projection(layer=k)
        trainer.receive_projection_sum(layer=k, others=np.zeros_like(y))
    up = trainer.finish_round()
    scale = 0.1 * (math.e + 1) / (math.e - 1)  # δ(e^β+1)/(e^β−1)
    for name, q in up.quantized.items():
        assert q.indices.size == int(np.prod(q.shape)) and set(np.unique(q.signs)) <= {-1, 1}, name
        assert q.r == pytest.approx(scale)
    assert cfg.privacy_record()["gradient_protection"] == {"kind": "dgrec", "delta": 0.1, "strength": 1.0,
                                                           "ldp_epsilon_per_element": 1.0}
    assert math.isfinite(federation(cfg, tiny_parties()).run_round(0).loss)  # the coordinator decodes and steps
