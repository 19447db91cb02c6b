"""VerFedGNN wire encodings: gradient uploads and trainer state round-trip exactly; wrong uploads are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.errors import ProtocolError
from services.verfedgnn.messages import decode_upload, encode_upload
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import GradientUpload, MetricSums, QuantizedArray


def test_gradient_upload_round_trip_is_exact_and_checked() -> None:
    q = QuantizedArray((4, 3), 3.0, np.array([0, 5, 11], np.int64), np.array([1, -1, 1], np.int8))
    up = GradientUpload("p0", 7, 12.5, quantized={"user_emb": q},
                        metrics={"test": MetricSums(4.0, 2.0, 9), "valid": MetricSums(1.0, 1.0, 2, 3.25, 7)})
    data = encode_upload(up)
    back = decode_upload(data, party_id="p0", round_index=7)
    assert back.quantized["user_emb"].shape == (4, 3) and np.array_equal(back.quantized["user_emb"].indices, q.indices)
    assert np.array_equal(back.quantized["user_emb"].signs, q.signs) and back.metrics["test"] == MetricSums(4.0, 2.0, 9)
    assert back.metrics["valid"] == MetricSums(1.0, 1.0, 2, 3.25, 7)  # the validation ranking sums travel too
    with pytest.raises(ProtocolError):
        decode_upload(data, party_id="p1", round_index=7)
    with pytest.raises(ProtocolError):
        decode_upload(data, party_id="p0", round_index=8)


def test_trainer_state_round_trip_restores_an_optimizer() -> None:
    p = torch.nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.Adagrad([p], lr=0.1)
    p.grad = torch.ones(3, 2)
    opt.step()
    state = load_state(dump_state({"private": {"w": p.detach().clone()}, "optimizer": opt.state_dict(), "round": 4}))
    fresh = torch.optim.Adagrad([torch.nn.Parameter(torch.zeros(3, 2))], lr=0.1)
    fresh.load_state_dict(state["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["sum"], opt.state_dict()["state"][0]["sum"])
    assert state["round"] == 4 and torch.equal(state["private"]["w"], p.detach())
