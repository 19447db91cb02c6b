"""Ternary quantization: unbiasedness, sparsity, validation and the compact wire format."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.crypto.quantization import (
    TernaryUpload,
    clip,
    decode_ternary,
    dequantize_gradients,
    encode_ternary,
    quantize_gradients,
    ternary_dequantize,
    ternary_quantize,
)
from services.errors import ProtocolError


def test_clip() -> None:
    np.testing.assert_array_equal(clip(np.array([-2.0, 0.1, 0.7])), [-0.5, 0.1, 0.5])
    with pytest.raises(ValueError):
        clip(np.zeros(2), 0.0)


def test_unbiased_and_ternary_values() -> None:
    """Mean of 4000 draws per element equals x (per-element std ≤ 0.02, tolerance 0.1)."""
    x = np.linspace(-0.5, 0.5, 41)
    draws = ternary_dequantize(
        ternary_quantize(np.tile(x, (4000, 1)), r=3.0, rng=np.random.default_rng(1))
    )
    assert set(np.unique(draws).tolist()) <= {-3.0, 0.0, 3.0}
    assert np.all(draws * x >= 0)  # a sign is never flipped
    assert np.abs(draws.mean(axis=0) - x).max() < 0.1


def test_expected_nonzeros_is_l1_over_r() -> None:
    x = np.random.default_rng(0).uniform(-0.5, 0.5, size=200_000)
    up = ternary_quantize(x, r=3.0, rng=np.random.default_rng(2))
    expected = np.abs(x).sum() / 3.0  # ≈ 16 667, binomial std ≈ 124
    assert abs(len(up.indices) - expected) < 600
    assert up.indices.dtype == np.int64 and up.signs.dtype == np.int8
    assert np.all(np.diff(up.indices) > 0)


def test_rejects_small_r_and_non_finite() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        ternary_quantize(np.array([0.5, 2.0]), r=1.0, rng=rng)
    with pytest.raises(ValueError):
        ternary_quantize(np.array([np.nan]), r=1.0, rng=rng)
    with pytest.raises(ValueError):
        ternary_quantize(np.array([0.1]), r=0.0, rng=rng)


def test_quantize_gradients_clips_then_quantizes() -> None:
    grads = {"w": np.full((50, 40), 10.0), "e": np.zeros((3,))}
    ups = quantize_gradients(grads, clip_bound=0.5, r=3.0, rng=np.random.default_rng(4))
    dense = dequantize_gradients(ups)
    assert dense["w"].shape == (50, 40) and not dense["e"].any()
    assert abs(dense["w"].mean() - 0.5) < 0.15  # clipped to 0.5, std of mean ≈ 0.03
    again = quantize_gradients(grads, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(again["w"].indices, ups["w"].indices)


def _upload(size: int, density: float, seed: int, shape: tuple[int, ...] | None = None) -> TernaryUpload:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, size=size) * (rng.random(size) < density)
    return ternary_quantize(x.reshape(shape or (size,)), r=0.5, rng=rng)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 40), min_size=0, max_size=3),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_roundtrip(shape: list[int], density: float, seed: int) -> None:
    size = int(np.prod(shape)) if shape else 1
    up = _upload(size, density, seed, tuple(shape))
    data = encode_ternary(up)
    assert up.nbytes() == len(data)
    back = decode_ternary(data)
    assert back.shape == up.shape and back.r == up.r
    np.testing.assert_array_equal(back.indices, up.indices)
    np.testing.assert_array_equal(back.signs, up.signs)
    np.testing.assert_array_equal(ternary_dequantize(back), ternary_dequantize(up))


def test_encoding_is_compact() -> None:
    """~1% density over 1M elements: under 2 bytes per non-zero (uint32 indices would be 4)."""
    up = _upload(1_000_000, 0.02, 0)
    assert len(encode_ternary(up)) < 2 * len(up.indices)


def _header(shape: tuple[int, ...], r: float, count: int, stream: int) -> bytes:
    dims = bytes(shape)  # single-byte varints suffice for small dims
    return b"TQ\x01" + bytes([len(shape)]) + dims + struct.pack("<d", r) + bytes([count, stream])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"XX\x01\x01\x05",
        _header((5,), float("nan"), 1, 1) + b"\x00\x80",
        _header((5,), -1.0, 1, 1) + b"\x00\x80",
        _header((5,), 1.0, 1, 1) + b"\x05\x80",  # index 5 out of range
        _header((5,), 1.0, 2, 2) + b"\x02\x02\xc0",  # indices 2, 5: out of range
        _header((5,), 1.0, 1, 1) + b"\x00\x80\x00",  # trailing byte
        _header((5,), 1.0, 1, 1) + b"\x00\xc0",  # non-zero sign padding
        _header((5,), 1.0, 1, 2) + b"\x80\x00\x80",  # non-canonical varint
        _header((5,), 1.0, 6, 6) + b"\x00" * 6 + b"\xfc",  # more non-zeros than elements
        _header((5,), 1.0, 1, 1) + b"\x00",  # truncated signs
    ],
)
def test_decode_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_ternary(data)


def test_decode_accepts_hand_built_and_enforces_max_size() -> None:
    data = _header((5,), 1.0, 2, 2) + b"\x01\x01\x80"  # indices 1, 3; signs +, -
    up = decode_ternary(data)
    np.testing.assert_array_equal(ternary_dequantize(up), [0, 1, 0, -1, 0])
    with pytest.raises(ProtocolError):
        decode_ternary(data, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_decode_garbage_only_raises_protocol_error(data: bytes) -> None:
    try:
        decode_ternary(b"TQ\x01" + data)
    except ProtocolError:
        pass


def test_upload_rejects_unsorted_or_out_of_range() -> None:
    for idx, sg in (([3, 1], [1, 1]), ([0, 0], [1, -1]), ([5], [1]), ([1], [0]), ([1, 2], [1])):
        with pytest.raises(ValueError):
            TernaryUpload(shape=(5,), r=1.0, indices=np.array(idx, np.int64), signs=np.array(sg, np.int8))
