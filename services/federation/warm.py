"""Warm start, protocol-neutral part: which row of the previous run each row of the new run continues.

A warm run starts from the active release's parameters. Rows are matched by id at the parties (users
through the two runs' PSI alignments, items through the party's catalogue); the coordinator receives
only the user map, as row positions, never an id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NEW = -1  # a row with no counterpart in the previous run: it keeps its fresh (cold-start) draw


def row_map(old_ids: Sequence[str], new_ids: Sequence[str]) -> np.ndarray:
    """int64 (len(new_ids),): the old row of each new id, NEW (-1) when the id is not among `old_ids`.

    Empty ids never match (an erased user's alignment slot is the empty tombstone).
    """
    index = {str(u): i for i, u in enumerate(old_ids) if str(u)}
    return np.array([index.get(str(u), NEW) for u in new_ids], dtype=np.int64)


def check_rows(rows: np.ndarray, *, n_old: int, n_new: int) -> np.ndarray:
    """A row map as received: int64 of length n_new, each entry NEW or an old row, no old row used twice."""
    out = np.asarray(rows, dtype=np.int64).reshape(-1)
    if out.size != n_new:
        raise ValueError(f"the row map has {out.size} rows, the new run {n_new}")
    kept = out[out != NEW]
    if kept.size and (kept.min() < 0 or kept.max() >= n_old):
        raise ValueError(f"the row map names rows outside the previous run's {n_old}")
    if np.unique(kept).size != kept.size:
        raise ValueError("the row map names an old row twice")
    return out


def remap_rows(old: np.ndarray, fresh: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`fresh` with row j replaced by old[rows[j]] wherever rows[j] is not NEW (trailing shapes must agree)."""
    if old.shape[1:] != fresh.shape[1:]:
        raise ValueError(f"row shapes differ: previous {old.shape[1:]}, new {fresh.shape[1:]} (architecture differs)")
    out = np.array(fresh, copy=True)
    kept = rows != NEW
    out[kept] = old[rows[kept]]
    return out
