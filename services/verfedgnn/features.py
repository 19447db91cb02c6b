"""Side information in the model: a party's feature rows as links (entity row, attribute token)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from services.data.features import FeatureRow
from services.verfedgnn.types import FeatureEdges, PartyData

NUMERIC_BINS = 4  # a numeric column becomes this many quantile bins (attribute nodes) in the model


def feature_edges(rows: Iterable[FeatureRow], index: Mapping[str, int], *,
                  bins: int = NUMERIC_BINS) -> FeatureEdges | None:
    """The model's links (row, token) of the entities in `index`: a categorical value is one token, a numeric
    column's value its quantile bin (bins over those entities); tokens numbered in sorted order, links sorted,
    so the result depends on neither the rows' nor the index's order. None when no entity has a value."""
    mine = [r for r in rows if r.entity_id in index]
    numeric: dict[str, list[float]] = {}
    for r in mine:
        if r.number is not None:
            numeric.setdefault(r.name, []).append(r.number)
    cuts = {name: np.unique(np.quantile(np.asarray(v, np.float64), np.linspace(0, 1, bins + 1)[1:-1]))
            for name, v in numeric.items()}
    pairs = {(index[r.entity_id], _token(r, cuts)) for r in mine}
    if not pairs:
        return None
    names = sorted({t for _, t in pairs})
    at = {t: k for k, t in enumerate(names)}
    links = np.array(sorted((e, at[t]) for e, t in pairs), dtype=np.int64).reshape(-1, 2)
    return FeatureEdges(links[:, 0].copy(), links[:, 1].copy(), len(names))


def _token(row: FeatureRow, cuts: Mapping[str, np.ndarray]) -> str:
    if row.text is not None:
        return f"{row.name}={row.text}"
    return f"{row.name}#{int(np.searchsorted(cuts[row.name], float(row.number or 0.0), side='right'))}"


def attach_features(data: PartyData, *, user_order: Sequence[str], item_order: Sequence[str],
                    users: Iterable[FeatureRow], items: Iterable[FeatureRow]) -> PartyData:
    """`data` with the party's attribute links: user rows in PartyData's order (aligned in `user_order`, then
    its private users), items in `item_order`."""
    uidx = {u: k for k, u in enumerate(user_order)}
    uidx.update({u: len(user_order) + k for k, u in enumerate(data.private_user_ids)})
    iidx = {v: k for k, v in enumerate(item_order)}
    return replace(data, user_features=feature_edges(users, uidx), item_features=feature_edges(items, iidx))
