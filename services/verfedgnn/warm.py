"""Warm start of VerFedGNN trainers: the previous run's parameters and optimizer moments, mapped by row.

Parameters indexed by user (the coordinator's e_u^0, b_u) or by item (a party's e_v^0, b_v, c_v) are
copied row by row through a row map (services.federation.warm); a row new since then keeps the
fresh draw a cold start would give it and zero optimizer moments. Every other parameter (layer
weights, gates, μ) is copied whole. The optimizer's moments are carried too when both runs use the
same optimizer, so the first steps continue the old run's instead of restarting Adam's bias correction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from services.federation.warm import check_rows, remap_rows


def _array(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _mapped(old: Any, fresh: torch.Tensor, rows: np.ndarray | None, name: str) -> torch.Tensor:
    old_a = _array(old)
    if rows is None:
        if old_a.shape != tuple(fresh.shape):
            raise ValueError(f"{name}: previous shape {old_a.shape}, new {tuple(fresh.shape)} (architecture differs)")
        return torch.from_numpy(np.array(old_a, dtype=np.float32))
    return torch.from_numpy(remap_rows(old_a.astype(np.float32), fresh.detach().cpu().numpy(), rows))


def load_mapped(*, module: torch.nn.Module, optimizer: torch.optim.Optimizer, params: Mapping[str, Any],
                optimizer_state: Mapping[str, Any] | None, rows: np.ndarray, by_row: set[str]) -> None:
    """Load a previous run's `params` (and optimizer state) into `module`, the parameters in `by_row` mapped by `rows`.

    Raises ValueError when the names or shapes do not fit (a different architecture).
    """
    own = dict(module.named_parameters())
    if set(params) != set(own):
        raise ValueError(f"parameters differ: previous {sorted(params)}, new {sorted(own)} (architecture differs)")
    n_old = {_array(params[k]).shape[0] for k in by_row}
    if len(n_old) != 1:
        raise ValueError(f"row-indexed parameters disagree on their row count: {sorted(n_old)}")
    rows = check_rows(rows, n_old=n_old.pop(), n_new=int(next(own[k] for k in by_row).shape[0]))
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(_mapped(params[name], p, rows if name in by_row else None, name))
    if optimizer_state is not None and _same_optimizer(optimizer, optimizer_state):
        optimizer.load_state_dict(_mapped_state(optimizer, optimizer_state, list(own), rows, by_row))


def _same_optimizer(optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> bool:
    """Same optimizer kind (the same hyper-parameter names) over as many parameters."""
    groups = state.get("param_groups") or []
    mine = optimizer.state_dict()["param_groups"]
    return (len(groups) == len(mine) and all(set(a) == set(b) and len(a["params"]) == len(b["params"])
                                             for a, b in zip(groups, mine)))


def _mapped_state(optimizer: torch.optim.Optimizer, state: Mapping[str, Any], names: list[str], rows: np.ndarray,
                  by_row: set[str]) -> dict[str, Any]:
    """The new optimizer's state dict (its own hyper-parameters kept) with the old moments mapped by row.

    The optimizer was built over the module's parameters in order, so state index i is parameter names[i].
    """
    out = optimizer.state_dict()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    out["state"] = {int(i): {k: _moment(v, tuple(params[int(i)].shape), rows if names[int(i)] in by_row else None,
                                        names[int(i)]) for k, v in entry.items()}
                    for i, entry in dict(state["state"]).items()}
    return out


def _moment(value: Any, shape: tuple[int, ...], rows: np.ndarray | None, name: str) -> Any:
    """One optimizer state entry: a per-element tensor is mapped like its parameter (zeros for new rows)."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or rows is None:
        return value
    fresh = torch.zeros(shape, dtype=value.dtype)
    return _mapped(value, fresh, rows, name).to(value.dtype)
