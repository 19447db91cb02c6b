"""Protocol-neutral wire encodings (npz trees, PSI points): exact round trips, and malformed input refused."""

from __future__ import annotations

import numpy as np
import pytest

from services.errors import ProtocolError
from services.protocol.federation import decode_points, encode_points, pack_tree, unpack_tree


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


def test_psi_points_must_be_32_bytes() -> None:
    assert decode_points(encode_points([b"a" * 32, b"b" * 32])) == [b"a" * 32, b"b" * 32]
    with pytest.raises(ProtocolError):
        decode_points(b"x" * 33)
