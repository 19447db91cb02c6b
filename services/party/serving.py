"""Serving from the latest completed model: rating predictions and top-K of this party's own catalogue.

The hot path never touches the database: `Snapshot` holds the published model, the id indexes and
every user's rated items as CSR arrays (built by `services.party.serving_cache`), and `predict` /
`recommend` are numpy over those arrays. Writes that change what serving answers (publish, ingest,
erasure) call `mark_changed` in their transaction so every serving process notices.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from models.blend import LocalRanking
from models.metrics import top_k_columns
from models.rating_blend import apply_tree
from models.scoring import serving_scores
from services.db.party_tables import FederationState, ModelArtifact
from services.errors import NotFound, ValidationFailed
from services.party.hot_path import POPULARITY, HotLists, Scorer, top_rows
from services.protocol.federation import pack_tree, unpack_tree

ARTIFACT_NAME = "serving_model"
ARTIFACT_KIND = "serving_model"
GENERATION_KEY = "serving:generation"  # a fresh random token on every change serving must see
ACTIVE_RELEASE_KEY = "serving:active_release"  # the coordinator's release this party serves (unset: newest model)
STAGED_PREFIX = "serving:release:"  # + release id -> artifact version of the model staged under it
MAX_K = 1000


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
    feedback: str = "explicit"  # implicit: the party trained the ranking objective only, it has no ratings
    aligned: np.ndarray | None = None  # bool (N,): the user is in the intersection (None: every user)
    local: dict[str, Any] | None = None  # models.blend.LocalRanking.to_tree(): the party's EASE and blend
    # the party's own rating component and its combination with r̂, fitted at publish
    # (services.party.rating_component); `scores` serves the combination when present
    rating_component: dict[str, np.ndarray] | None = None

    def to_bytes(self) -> bytes:
        """Artifact bytes (npz, no pickle)."""
        return pack_tree({k: getattr(self, k) for k in self.__dataclass_fields__ if getattr(self, k) is not None})

    @staticmethod
    def from_bytes(data: bytes) -> ServingModel:
        """Parse artifact bytes."""
        tree: dict[str, Any] = unpack_tree(data)
        if "rating_dim" in tree:
            tree["rating_dim"] = int(tree["rating_dim"])
        if "aligned" in tree:
            tree["aligned"] = np.asarray(tree["aligned"], bool)
        return ServingModel(**tree)

    @cached_property
    def local_ranking(self) -> LocalRanking | None:
        """The party's local EASE blended with this model (None: top-K ranks by the federated score alone)."""
        return None if self.local is None else LocalRanking.from_tree(self.local)

    @cached_property
    def scorer(self) -> Scorer:
        """What serving's top-K reads that no request changes (services.party.hot_path), built on first use."""
        return Scorer.of(self)

    def is_aligned(self, user: int) -> bool:
        """Whether model row `user` is a user of the intersection."""
        return True if self.aligned is None else bool(self.aligned[user])

    @property
    def score_kind(self) -> str:
        """What `scores` answers: "rating" (explicit feedback) or "ranking_score" (implicit: s(u, v), not a rating)."""
        return "ranking_score" if self.feedback == "implicit" else "rating"

    # The score functions: the only place serving decides what a score is.
    def scores(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """r̂ = μ + b_u + b_v + h_u·h_v for parallel index arrays, clipped to the rating range.

        An implicit party's model has no rating: its answer is the ranking score s(u, v) = h_u·h_v + c_v
        (every coordinate, unclipped), the score its top-K ranks by.
        """
        if self.feedback == "implicit":
            return np.einsum("nd,nd->n", self.h_u[users], self.h_v[items]) + self._item_prior(items)
        d = self.rating_dim or self.h_u.shape[1]
        raw = (self.global_bias + self.user_bias[users] + self.item_bias[items]
               + np.einsum("nd,nd->n", self.h_u[users, :d], self.h_v[items, :d]))
        federated = np.clip(raw, self.rating_min, self.rating_max)
        if self.rating_component is None:
            return federated
        return apply_tree(self.rating_component, users=users, items=items, base=federated, low=self.rating_min,
                          high=self.rating_max)

    def without_component(self) -> ServingModel:
        """The same model serving the federated prediction alone."""
        return replace(self, rating_component=None)

    def rank_scores(self, user: int, items: np.ndarray) -> np.ndarray:
        """The ranking score of one user against `items`, unclipped (no ties at the top of the scale)."""
        return serving_scores(self.h_u[user][None, :], self.h_v[items],
                              rank_bias=None if self.rank_bias is None else self.rank_bias[items],
                              rating_dim=self.rating_dim, global_bias=self.global_bias,
                              user_bias=self.user_bias[[user]], item_bias=self.item_bias[items])[0]

    def user_scores(self, user: int) -> np.ndarray:
        """`rank_scores` of one user against every item as one mat-vec (a fresh array the caller may modify)."""
        # models.scoring.serving_scores, folded (tests/unit/party/test_serving_score.py holds them equal): [h_v | c_v]·[h_u; 1], or [h_v[:, :d] | b_v | 1]·[h_u[:d]; 1; μ + b_u].
        matrix = self.item_matrix
        vector = np.empty(matrix.shape[1], np.float32)
        if self.rank_bias is not None:
            vector[:-1], vector[-1] = self.h_u[user], 1.0
        else:
            vector[:-2] = self.h_u[user, :matrix.shape[1] - 2]
            vector[-2:] = (1.0, self.global_bias + float(self.user_bias[user]))
        return matrix @ vector

    def _item_prior(self, items: np.ndarray) -> np.ndarray:
        """c_v of the ranking score (0 without one)."""
        return np.zeros(len(items)) if self.rank_bias is None else self.rank_bias[items].astype(np.float64)

    def cold_scores(self, items: np.ndarray) -> np.ndarray:
        """Bias-only estimate for a user without h_u (rated after training): the item's popularity prior."""
        if self.feedback == "implicit":  # the ranking score's item term c_v
            return self._item_prior(items)
        return np.clip(self.global_bias + self.item_bias[items].astype(np.float64), self.rating_min, self.rating_max)

    @cached_property
    def item_matrix(self) -> np.ndarray:
        """The item side of `user_scores` as one C-contiguous float32 matrix, built on first use."""
        m = len(self.item_ids)
        if self.rank_bias is not None:
            parts = [self.h_v, self.rank_bias.reshape(m, 1)]
        else:
            parts = [self.h_v[:, :self.rating_dim or self.h_v.shape[1]], self.item_bias.reshape(m, 1),
                     np.ones((m, 1), np.float32)]
        return np.ascontiguousarray(np.hstack([p.astype(np.float32) for p in parts]))


@dataclass(frozen=True)
class Snapshot:
    """Everything serving reads, immutable: swapped whole when the model or the data change."""

    version: int
    token: str | None  # the generation token read before the data (None: unknown)
    release_id: str | None  # the coordinator's release served (None: a model published without one)
    model: ServingModel
    item_index: dict[str, int]  # external item id -> model item index
    user_rows: dict[str, int]  # every user the party holds -> row of the CSR below
    model_row: np.ndarray  # int64 per user row: its model row, -1 for a user without h_u
    rated_ptr: np.ndarray  # int64 (U + 1,): CSR offsets of each user's rated model items
    rated_idx: np.ndarray  # int64: model item indices (ratings labelled test are left out: still candidates)
    popular: np.ndarray  # model item indices by descending rating count (ties: model order)
    counts: np.ndarray  # rating count per model item
    hot: HotLists | None = None  # every user's precomputed top-K and affine map (None: until built)

    def without_user(self, user_id: str) -> Snapshot:
        """The same snapshot with one user gone (erasure answers 404 at once, before any reload)."""
        if user_id not in self.user_rows:
            return self
        rows = dict(self.user_rows)
        del rows[user_id]
        return replace(self, user_rows=rows)  # the user's row, and its precomputed list, become unreachable

    def score_rows(self, rows: np.ndarray, *, mask: bool = True) -> np.ndarray:
        """Served scores (len(rows), M) of snapshot rows ranked by the model or EASE (`hot_path.Scorer.score_rows`)."""
        affine = None if self.hot is None else self.hot.affine[rows]
        return self.model.scorer.score_rows(self.model_row, self.rated_ptr, self.rated_idx, rows, affine=affine,
                                            mask=mask)[0]

    def kind(self, row: int) -> int:
        """What ranks a user row: hot_path.POPULARITY, MODEL or LOCAL."""
        if self.hot is not None:
            return int(self.hot.kind[row])
        history = self.rated_ptr[row + 1] - self.rated_ptr[row]
        return int(self.model.scorer.kinds(self.model_row[[row]], np.array([history]))[0])


def publish(*, session: Session, model: ServingModel, release_id: str | None = None) -> int:
    """Store a model as the next version of the serving artifact; returns the version.

    With a release id the model is staged: stored under that id, not served until `activate`.
    Without one it is served at once (the newest model, as before releases existed).
    """
    latest = session.scalar(select(func.max(ModelArtifact.version)).where(ModelArtifact.name == ARTIFACT_NAME))
    version = int(latest or 0) + 1
    session.add(ModelArtifact(name=ARTIFACT_NAME, kind=ARTIFACT_KIND, version=version, payload=model.to_bytes(),
                              meta={"run_id": model.run_id, "round_index": model.round_index,
                                    "n_users": len(model.user_ids), "n_items": len(model.item_ids),
                                    "release_id": release_id}))
    if release_id is None:
        _put(session, ACTIVE_RELEASE_KEY, None)
        mark_changed(session=session)
    else:
        _put(session, STAGED_PREFIX + release_id, version)
    session.commit()
    return version


def activate(*, session: Session, release_id: str) -> int:
    """Serve the model staged under `release_id` (every process of this party within its refresh); its version."""
    version = _get(session, STAGED_PREFIX + release_id)
    if version is None:
        raise NotFound(f"release {release_id!r} is not staged at this party", extra={"field": "release_id"})
    _put(session, ACTIVE_RELEASE_KEY, release_id)
    mark_changed(session=session)
    session.commit()
    return int(version)


def release_model(*, session: Session, release_id: str) -> ServingModel | None:
    """The model staged here under `release_id` (None when this party did not stage it or pruned it)."""
    version = _get(session, STAGED_PREFIX + release_id)
    payload = None if version is None else session.scalar(
        select(ModelArtifact.payload).where(ModelArtifact.name == ARTIFACT_NAME, ModelArtifact.version == int(version)))
    return None if payload is None else ServingModel.from_bytes(payload)


def prune_releases(*, session: Session, keep: list[str]) -> tuple[list[str], list[str]]:
    """Delete every staged release not in `keep` (never the active one): its serving model and its run's
    trainer snapshots, alignment and settings. Returns (pruned release ids, their runs), sorted."""
    active = _get(session, ACTIVE_RELEASE_KEY)
    kept = set(keep) | ({str(active)} if active is not None else set())
    staged = session.execute(select(FederationState.key, FederationState.value)
                             .where(FederationState.key.startswith(STAGED_PREFIX, autoescape=True))).all()
    kept_versions = {int(v) for k, v in staged if k.removeprefix(STAGED_PREFIX) in kept and v is not None}
    pruned, runs = [], set()
    for key, version in staged:
        if key.removeprefix(STAGED_PREFIX) in kept:
            continue
        row = None if version is None else session.scalar(
            select(ModelArtifact).where(ModelArtifact.name == ARTIFACT_NAME, ModelArtifact.version == int(version)))
        if row is not None and int(row.version) not in kept_versions:
            run_id = (row.meta or {}).get("run_id")
            if run_id:
                runs.add(str(run_id))
            session.delete(row)
        session.execute(delete(FederationState).where(FederationState.key == key))
        pruned.append(key.removeprefix(STAGED_PREFIX))
    # A kept release's run keeps its artifacts (a resumed publish or a warm start may read them).
    kept_runs = {str((m or {}).get("run_id")) for v, m in session.execute(
        select(ModelArtifact.version, ModelArtifact.meta).where(ModelArtifact.name == ARTIFACT_NAME)) if int(v) in kept_versions}
    runs -= kept_runs
    for run_id in runs:
        session.execute(delete(ModelArtifact).where(ModelArtifact.name.in_(
            [f"trainer:{run_id}", f"alignment:{run_id}", f"best-model:{run_id}", f"best-trainer:{run_id}"])))
        session.execute(delete(FederationState).where(FederationState.key == f"run:{run_id}"))
    session.commit()
    return sorted(pruned), sorted(runs)


def served(*, session: Session) -> tuple[int, str | None] | None:
    """(artifact version, release id) serving answers from: the active release's model, else the newest model
    published without a release (None: nothing to serve)."""
    release_id = _get(session, ACTIVE_RELEASE_KEY)
    if release_id is not None:
        version = _get(session, STAGED_PREFIX + str(release_id))
        if version is not None:
            return int(version), str(release_id)
    # Never a staged model: before any activation, only a model published without a release serves.
    rows = session.execute(select(ModelArtifact.version, ModelArtifact.meta).where(ModelArtifact.name == ARTIFACT_NAME)
                           .order_by(ModelArtifact.version.desc()))
    return next(((int(v), None) for v, meta in rows if not (meta or {}).get("release_id")), None)


def _get(session: Session, key: str) -> Any:
    return session.scalar(select(FederationState.value).where(FederationState.key == key))


def _put(session: Session, key: str, value: Any) -> None:
    """Upsert one state value in the caller's transaction."""
    row = session.get(FederationState, key)
    if row is None:
        session.add(FederationState(key=key, value=value))
    else:
        row.value = value


def mark_changed(*, session: Session) -> None:
    """Record, in the caller's transaction, that what serving answers changed (publish, ingest, erasure)."""
    # A random token rather than a counter: concurrent writers need no read-modify-write, and a poller
    # that saw token T notices any later commit because it cannot write T again.
    insert = (sqlite if session.get_bind().dialect.name == "sqlite" else postgresql).insert
    stmt = insert(FederationState.__table__)  # type: ignore[arg-type]
    token = uuid.uuid4().hex
    session.execute(stmt.on_conflict_do_update(index_elements=["key"], set_={"value": stmt.excluded.value,
                                                                              "updated_at": func.now()}),
                    [{"key": GENERATION_KEY, "value": token}])


def generation(*, session: Session) -> str | None:
    """The current generation token (one primary-key read)."""
    value = session.scalar(select(FederationState.value).where(FederationState.key == GENERATION_KEY))
    return None if value is None else str(value)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first (equal scores: lower index first); k <= len(scores).

    The one top-k (`models.metrics.top_k_columns`, what the parties' validation ranking reports) on one row.
    """
    if k <= 0:
        return np.empty(0, np.int64)
    return top_k_columns(scores[None, :], np.zeros((1, len(scores)), dtype=bool), k)[0]


def _rated(snap: Snapshot, row: int) -> np.ndarray:
    return snap.rated_idx[snap.rated_ptr[row]:snap.rated_ptr[row + 1]]


def precomputed(snapshot: Snapshot, k: int) -> bool:
    """Whether a top-k from this snapshot is a slice of precomputed lists (no scoring: safe on an event loop)."""
    return snapshot.hot is not None and 1 <= k <= snapshot.hot.top.shape[1]


def recommend(*, snapshot: Snapshot, user_id: str, k: int) -> dict[str, Any]:
    """Top-k by ranking score of this party's items the user has not rated; cold users get the most popular, flagged.

    A model published with a local ranking (`ServingModel.local`) ranks by the blend of the federated
    score and the party's own EASE (`models.blend`), and a user without a model row by EASE alone
    (flagged "local"); scores are then calibrated log-odds, comparable across parties for the merge.

    Ratings labelled test (PUT /v1/evaluation-split) are held out of the model, so they stay candidates
    (the snapshot's rated items leave them out).
    """
    if not 1 <= k <= MAX_K:
        raise ValidationFailed(f"k must be between 1 and {MAX_K}", extra={"field": "k"})
    snap = snapshot
    row = snap.user_rows.get(user_id)
    if row is None:
        raise NotFound(f"user {user_id!r} is unknown to this party", extra={"field": "user_id"})
    kind, hot = snap.kind(row), snap.hot
    fallback: str | None
    if kind == POPULARITY:
        # Walk the popularity order past the user's own items: at most k + |rated| entries.
        rated = _rated(snap, row)
        head = snap.popular[:k + len(rated)]
        top = head[~np.isin(head, rated)][:k]
        values, fallback = snap.counts[top].astype(np.float64), "popularity"
    else:
        # The model's (blended) score, or EASE alone for a user without a model row ("local"): the precomputed
        # list when it is long enough, else the user's row scored now (one mat-vec and one partial sort).
        if hot is not None and k <= hot.top.shape[1]:
            top, values = hot.top[row, :k], hot.top_scores[row, :k]
        else:
            top, values = (a[0] for a in top_rows(snap.score_rows(np.array([row])), k))
        listed = top >= 0
        top, values = top[listed], values[listed].astype(np.float64)
        fallback = None if snap.model_row[row] >= 0 else "local"
    ids = snap.model.item_ids[top].tolist()
    items = [{"item_id": str(i), "score": float(s)} for i, s in zip(ids, values.tolist())]
    return {"user_id": user_id, "items": items, "fallback": fallback, "model_version": snap.version,
            "run_id": snap.model.run_id, "release_id": snap.release_id}


def _ratings(snap: Snapshot, pairs: list[tuple[str, str]], items: np.ndarray, rows: np.ndarray
             ) -> list[dict[str, Any]]:
    """Predicted ratings of pairs whose ids are all known (model indexes given); cold users → fallback."""
    model_rows = snap.model_row[rows]
    warm = model_rows >= 0
    ratings = np.empty(len(pairs), np.float64)
    ratings[warm] = snap.model.scores(model_rows[warm], items[warm])
    ratings[~warm] = snap.model.cold_scores(items[~warm])
    fallback: list[str | None] = [None if w else "popularity" for w in warm.tolist()]
    if snap.model.feedback == "implicit" and snap.model.local is not None:
        # an implicit party answers the score its top-K ranks by: the served blend's log-odds
        for row in np.unique(rows).tolist():
            if snap.kind(row) == POPULARITY:
                continue
            sel = rows == row
            ratings[sel] = snap.score_rows(np.array([row]), mask=False)[0, items[sel]]
            for j in np.flatnonzero(sel).tolist():
                fallback[j] = None if snap.model_row[row] >= 0 else "local"
    return [{"user_id": u, "item_id": i, "rating": r, "fallback": f}
            for (u, i), r, f in zip(pairs, ratings.tolist(), fallback)]


def _indexes(snap: Snapshot, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Model item index and user row of every pair (-1: unknown to this party)."""
    items = np.array([snap.item_index.get(i, -1) for _, i in pairs], np.int64)
    rows = np.array([snap.user_rows.get(u, -1) for u, _ in pairs], np.int64)
    return items, rows


def predict(*, snapshot: Snapshot, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Predicted ratings (implicit party: ranking scores) for (user, item) pairs; unknown ids → 404 naming the
    first bad row, cold users → fallback."""
    items, rows = _indexes(snapshot, pairs)
    bad = np.flatnonzero((items < 0) | (rows < 0))
    if len(bad):
        r = int(bad[0])
        user, item = pairs[r]
        if items[r] < 0:
            raise NotFound(f"item {item!r} is not in this party's catalogue", extra={"row": r, "field": "item_id"})
        raise NotFound(f"user {user!r} is unknown to this party", extra={"row": r, "field": "user_id"})
    return _ratings(snapshot, pairs, items, rows)


def predict_known(*, snapshot: Snapshot, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """`predict` of the pairs this party knows, in request order; the others listed in "skipped" (row, field).

    The coordinator's prediction fan-out asks this way, so one unknown pair does not void a batch.
    """
    items, rows = _indexes(snapshot, pairs)
    known = (items >= 0) & (rows >= 0)
    skipped = [{"row": r, "field": "item_id" if items[r] < 0 else "user_id"} for r in np.flatnonzero(~known).tolist()]
    keep = np.flatnonzero(known)
    return {"predictions": _ratings(snapshot, [pairs[r] for r in keep.tolist()], items[keep], rows[keep]),
            "skipped": skipped, "release_id": snapshot.release_id, "score_kind": snapshot.model.score_kind}
