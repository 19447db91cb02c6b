"""Bytes for engine state dicts (torch tensors, optimizer state with int keys) via the npz tree encoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from services.protocol.federation import pack_tree, unpack_tree

_T, _I = "__tensor__", "__intkeys__"


def _encode(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return {_T: obj.detach().cpu().numpy().copy()}
    if isinstance(obj, dict):
        if obj and all(isinstance(k, int) for k in obj):
            return {_I: [[k, _encode(v)] for k, v in obj.items()]}
        return {str(k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    return obj


def _decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_T}:
            return torch.from_numpy(np.array(obj[_T]))
        if set(obj) == {_I}:
            return {int(k): _decode(v) for k, v in obj[_I]}
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def dump_state(state: dict[str, Any]) -> bytes:
    """Serialise a trainer/optimizer state dict (no pickle)."""
    return pack_tree(_encode(state))


def load_state(data: bytes) -> dict[str, Any]:
    """Inverse of dump_state (tensors come back as torch tensors)."""
    out: dict[str, Any] = _decode(unpack_tree(data, finite=False))
    return out
