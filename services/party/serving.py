"""Serving from the latest completed model: rating predictions and top-K of this party's own catalogue."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.db.party_tables import Interaction, Item, ModelArtifact, User
from services.errors import Conflict, NotFound, ValidationFailed
from services.party import fed_store
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn import scoring

ARTIFACT_NAME = "serving_model"
ARTIFACT_KIND = "serving_model"


@dataclass(frozen=True)
class ServingModel:
    """Final representations: h_u for the aligned users, h_v for this party's items, biases."""

    run_id: str
    round_index: int
    user_ids: np.ndarray  # str, aligned users in model order
    item_ids: np.ndarray  # str, this party's items in model order
    h_u: np.ndarray  # float32 (N, D)
    h_v: np.ndarray  # float32 (M, D)
    user_bias: np.ndarray  # float32 (N,)
    item_bias: np.ndarray  # float32 (M,)
    global_bias: float
    rating_min: float
    rating_max: float
    rank_bias: np.ndarray | None = None  # float32 (M,): c_v of a model trained with the ranking objective
    rating_dim: int = 0  # leading coordinates of h that the rating uses (0: all of them)

    def to_bytes(self) -> bytes:
        """Artifact bytes (npz, no pickle)."""
        return pack_tree({k: getattr(self, k) for k in self.__dataclass_fields__ if getattr(self, k) is not None})

    @staticmethod
    def from_bytes(data: bytes) -> ServingModel:
        """Parse artifact bytes."""
        tree: dict[str, Any] = unpack_tree(data)
        if "rating_dim" in tree:
            tree["rating_dim"] = int(tree["rating_dim"])
        return ServingModel(**tree)

    def scores(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """r̂ = μ + b_u + b_v + h_u·h_v for parallel index arrays, clipped to the rating range."""
        d = self.rating_dim or self.h_u.shape[1]
        raw = (self.global_bias + self.user_bias[users] + self.item_bias[items]
               + np.einsum("nd,nd->n", self.h_u[users, :d], self.h_v[items, :d]))
        return np.clip(raw, self.rating_min, self.rating_max)

    def rank_scores(self, user: int, items: np.ndarray) -> np.ndarray:
        """The ranking score of one user against `items`, unclipped (no ties at the top of the scale)."""
        return scoring.rank_scores(self.h_u[user][None, :], self.h_v[items],
                                   rank_bias=None if self.rank_bias is None else self.rank_bias[items],
                                   rating_dim=self.rating_dim, global_bias=self.global_bias,
                                   user_bias=self.user_bias[[user]], item_bias=self.item_bias[items])[0]


def publish(*, session: Session, model: ServingModel) -> int:
    """Store a model as the next version of the serving artifact; returns the version."""
    latest = session.scalar(select(func.max(ModelArtifact.version)).where(ModelArtifact.name == ARTIFACT_NAME))
    version = int(latest or 0) + 1
    session.add(ModelArtifact(name=ARTIFACT_NAME, kind=ARTIFACT_KIND, version=version, payload=model.to_bytes(),
                              meta={"run_id": model.run_id, "round_index": model.round_index,
                                    "n_users": len(model.user_ids), "n_items": len(model.item_ids)}))
    session.commit()
    return version


@dataclass
class _Loaded:
    version: int
    model: ServingModel
    user_index: dict[str, int]
    item_index: dict[str, int]
    popularity: np.ndarray  # rating counts per model item (for the cold-user fallback)
    held_out: dict[str, set[str]]  # user → items labelled test: not "already had", so still candidates


class ModelCache:
    """Keeps the newest published model and its indexes in memory; reloads when a newer version exists."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None

    def clear(self) -> None:
        """Forget the loaded model (an erasure rewrote it in place)."""
        with self._lock:
            self._loaded = None

    def get(self, *, session: Session) -> _Loaded:
        """The latest model; 409 when none has been published yet."""
        version = session.scalar(select(func.max(ModelArtifact.version)).where(ModelArtifact.name == ARTIFACT_NAME))
        if version is None:
            raise Conflict("no trained model has been published at this party yet", extra={"code": "model_not_ready"})
        with self._lock:
            if self._loaded is None or self._loaded.version != version:
                row = session.scalar(select(ModelArtifact).where(ModelArtifact.name == ARTIFACT_NAME,
                                                                 ModelArtifact.version == version))
                assert row is not None and row.payload is not None
                model = ServingModel.from_bytes(row.payload)
                items = {str(x): i for i, x in enumerate(model.item_ids.tolist())}
                self._loaded = _Loaded(version, model, {str(u): i for i, u in enumerate(model.user_ids.tolist())},
                                       items, _popularity(session=session, item_index=items),
                                       fed_store.test_items_by_user(session=session))
            return self._loaded


def _popularity(*, session: Session, item_index: dict[str, int]) -> np.ndarray:
    counts = np.zeros(len(item_index), dtype=np.int64)
    rows = session.execute(select(Item.external_id, func.count(Interaction.id))
                           .join(Interaction, Interaction.item_id == Item.id).group_by(Item.external_id))
    for ext, n in rows:
        if ext in item_index:
            counts[item_index[ext]] = n
    return counts


def _known_users(session: Session, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        found.update(session.scalars(select(User.external_id).where(User.external_id.in_(chunk))))
    return found


def predict(*, session: Session, cache: ModelCache, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Predicted ratings for (user, item) pairs; unknown ids → 404 naming the row, cold users → fallback."""
    loaded = cache.get(session=session)
    m = loaded.model
    known = _known_users(session, sorted({u for u, _ in pairs} - set(loaded.user_index)))
    out: list[dict[str, Any]] = []
    for row, (user, item) in enumerate(pairs):
        if item not in loaded.item_index:
            raise NotFound(f"item {item!r} is not in this party's catalogue", extra={"row": row, "field": "item_id"})
        j = loaded.item_index[item]
        if user in loaded.user_index:
            score = float(m.scores(np.array([loaded.user_index[user]]), np.array([j]))[0])
            out.append({"user_id": user, "item_id": item, "rating": score, "fallback": None})
        elif user in known:
            # Cold user: no h_u was trained, so answer the item's bias-only estimate (its popularity prior).
            score = float(np.clip(m.global_bias + m.item_bias[j], m.rating_min, m.rating_max))
            out.append({"user_id": user, "item_id": item, "rating": score, "fallback": "popularity"})
        else:
            raise NotFound(f"user {user!r} is unknown to this party", extra={"row": row, "field": "user_id"})
    return out


def recommend(*, session: Session, cache: ModelCache, user_id: str, k: int) -> dict[str, Any]:
    """Top-k by ranking score of this party's items the user has not rated; cold users get the most popular, flagged.

    Ratings labelled test (PUT /v1/evaluation-split) are held out of the model, so they stay candidates.
    """
    if not 1 <= k <= 1000:
        raise ValidationFailed("k must be between 1 and 1000", extra={"field": "k"})
    loaded = cache.get(session=session)
    user = session.scalar(select(User).where(User.external_id == user_id))
    if user is None:
        raise NotFound(f"user {user_id!r} is unknown to this party", extra={"field": "user_id"})
    rated = set(session.scalars(select(Item.external_id).join(Interaction, Interaction.item_id == Item.id)
                                .where(Interaction.user_id == user.id))) - loaded.held_out.get(user_id, set())
    mask = np.array([x not in rated for x in loaded.model.item_ids.tolist()], dtype=bool)
    candidates = np.flatnonzero(mask)
    if user_id in loaded.user_index:
        scores = loaded.model.rank_scores(loaded.user_index[user_id], candidates).astype(np.float64)
        fallback = None
    else:
        scores = loaded.popularity[candidates].astype(np.float64)
        fallback = "popularity"
    top = candidates[np.argsort(-scores, kind="stable")[:k]]
    by_item = dict(zip(candidates.tolist(), scores.tolist()))
    items = [{"item_id": str(loaded.model.item_ids[j]), "score": float(by_item[int(j)])} for j in top]
    return {"user_id": user_id, "items": items, "fallback": fallback, "model_version": loaded.version,
            "run_id": loaded.model.run_id}
