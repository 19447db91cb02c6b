"""Wire encodings of federation messages: exact round trips, and malformed input refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.errors import ProtocolError
from services.protocol.federation import pack_tree, unpack_tree
from services.protocol.psi import decode_points, encode_points
from services.verfedgnn.messages import decode_upload, encode_upload
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import GradientUpload, MetricSums, QuantizedArray


def test_tree_round_trip_keeps_dtypes_shapes_and_scalars() -> None:
    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float64(2.5), "z": np.array(3.0),
            "l": [1, "x", None, {"b": np.int8([1, -1])}]}
    back = unpack_tree(pack_tree(tree))
    assert back["a"].dtype == np.float32 and np.array_equal(back["a"], tree["a"]) and back["z"].shape == ()
    assert back["s"] == 2.5 and back["l"][:3] == [1, "x", None] and back["l"][3]["b"].dtype == np.int8


@pytest.mark.parametrize("body", [b"", b"PK\x03\x04junk", pack_tree({"a": np.array([np.nan], np.float32)})])
def test_malformed_trees_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        unpack_tree(body)


def test_gradient_upload_round_trip_is_exact_and_checked() -> None:
    q = QuantizedArray((4, 3), 3.0, np.array([0, 5, 11], np.int64), np.array([1, -1, 1], np.int8))
    up = GradientUpload("p0", 7, 12.5, quantized={"user_emb": q}, metrics={"test": MetricSums(4.0, 2.0, 9)})
    data = encode_upload(up)
    back = decode_upload(data, party_id="p0", round_index=7)
    assert back.quantized["user_emb"].shape == (4, 3) and np.array_equal(back.quantized["user_emb"].indices, q.indices)
    assert np.array_equal(back.quantized["user_emb"].signs, q.signs) and back.metrics["test"] == MetricSums(4.0, 2.0, 9)
    with pytest.raises(ProtocolError):
        decode_upload(data, party_id="p1", round_index=7)
    with pytest.raises(ProtocolError):
        decode_upload(data, party_id="p0", round_index=8)


def test_psi_points_must_be_32_bytes() -> None:
    assert decode_points(encode_points([b"a" * 32, b"b" * 32])) == [b"a" * 32, b"b" * 32]
    with pytest.raises(ProtocolError):
        decode_points(b"x" * 33)


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
