"""Party-side persistence for federation: evaluation-split labels, alignments, run settings, trainer snapshots."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.db.party_tables import FederationState, Interaction, Item, ModelArtifact, User
from services.errors import ValidationFailed
from services.federation.plan import SPLIT_CODES
from services.protocol.federation import pack_tree, unpack_tree

SPLIT_ARTIFACT = "evaluation_split"


def put_artifact(*, session: Session, name: str, kind: str, payload: bytes, version: int | None = None,
                 meta: dict[str, Any] | None = None) -> int:
    """Store bytes as an artifact version (next version when not given; replaces an equal version)."""
    if version is None:
        latest = session.scalar(select(func.max(ModelArtifact.version)).where(ModelArtifact.name == name))
        version = int(latest or 0) + 1
    session.execute(delete(ModelArtifact).where(ModelArtifact.name == name, ModelArtifact.version == version))
    session.add(ModelArtifact(name=name, kind=kind, version=version, payload=payload, meta=meta))
    session.commit()
    return version


def get_artifact(*, session: Session, name: str, max_version: int | None = None) -> tuple[int, bytes] | None:
    """Newest (version, payload) of an artifact, optionally at most `max_version`."""
    stmt = select(ModelArtifact).where(ModelArtifact.name == name)
    if max_version is not None:
        stmt = stmt.where(ModelArtifact.version <= max_version)
    row = session.scalar(stmt.order_by(ModelArtifact.version.desc()).limit(1))
    return None if row is None or row.payload is None else (row.version, row.payload)


def prune_artifact(*, session: Session, name: str, below_version: int) -> None:
    """Delete versions older than `below_version`."""
    session.execute(delete(ModelArtifact).where(ModelArtifact.name == name, ModelArtifact.version < below_version))
    session.commit()


def put_state(*, session: Session, key: str, value: Any) -> None:
    """Upsert one federation-state value (JSON)."""
    row = session.get(FederationState, key)
    if row is None:
        session.add(FederationState(key=key, value=value))
    else:
        row.value = value
    session.commit()


def get_state(*, session: Session, key: str) -> Any:
    """One federation-state value, or None."""
    row = session.get(FederationState, key)
    return None if row is None else row.value


def states_with_prefix(*, session: Session, prefix: str) -> dict[str, Any]:
    """Every federation-state value whose key starts with `prefix`, by the rest of the key."""
    rows = session.execute(select(FederationState.key, FederationState.value)
                           .where(FederationState.key.startswith(prefix, autoescape=True))).all()
    return {str(k)[len(prefix):]: v for k, v in rows}


def add_states(*, session: Session, values: dict[str, Any]) -> None:
    """Upsert several federation-state values in one commit."""
    for k, v in values.items():
        session.merge(FederationState(key=k, value=v))
    session.commit()


CARVE_KEY = "validation:carved"  # federation state: the run whose settings first carved the validation labels


def stored_pairs(*, session: Session) -> set[tuple[str, str]]:
    """Every (user, item) pair this party holds a rating or interaction of."""
    rows = session.execute(select(User.external_id, Item.external_id)
                           .join(Interaction, Interaction.user_id == User.id).join(Item, Interaction.item_id == Item.id))
    return {(str(u), str(i)) for u, i in rows}


def set_evaluation_split(*, session: Session, users: list[str], items: list[str], splits: list[str],
                         skip_unheld: bool = False) -> tuple[int, int]:
    """Label held-out ratings valid/test (unlabelled ratings train); replaces earlier labels.

    Every pair must be one this party stores (422 naming how many are not, and the first): a label of a pair
    it does not hold scores nothing, and a run would then report no test figures. Validation labels a run
    carved (`keep_carved_validation`) stay unless the new labels bring validation pairs of their own. With
    `skip_unheld` the pairs it does not store are left out instead; returns (labels stored, pairs left out).
    """
    held = stored_pairs(session=session)
    missing = [(n, u, i) for n, (u, i) in enumerate(zip(users, items), 1) if (u, i) not in held]
    skipped = len(missing) if skip_unheld else 0
    if skip_unheld and missing:
        keep = [(u, i) in held for u, i in zip(users, items)]
        users = [u for u, k in zip(users, keep) if k]
        items = [i for i, k in zip(items, keep) if k]
        splits = [s for s, k in zip(splits, keep) if k]
        if not splits:
            raise ValidationFailed(f"none of the {len(missing)} pairs is stored at this party: nothing labelled",
                                   extra={"field": "rows", "missing": len(missing)})
    elif missing:
        n, u, i = missing[0]
        raise ValidationFailed(
            f"{len(missing)} of {len(users)} pairs are not stored at this party (the first: row {n}, user {u!r} item "
            f"{i!r}); label only ratings it holds: ingest them first (fedrec party ingest), then label them",
            extra={"field": "rows", "row": n, "missing": len(missing)})
    labelled = len(splits)
    if "valid" not in splits and get_state(session=session, key=CARVE_KEY) is not None:
        now = set(zip(users, items))
        kept = [(u, i) for (u, i), c in _labels(session).items()
                if c == SPLIT_CODES["valid"] and (u, i) not in now]
        users, items = [*users, *(u for u, _ in kept)], [*items, *(i for _, i in kept)]
        splits = [*splits, *(["valid"] * len(kept))]
    codes = np.array([SPLIT_CODES[s] for s in splits], dtype=np.int8)
    payload = pack_tree({"users": np.array(users, dtype=str), "items": np.array(items, dtype=str), "codes": codes})
    put_artifact(session=session, name=SPLIT_ARTIFACT, kind="evaluation_split", payload=payload)
    prune_artifact(session=session, name=SPLIT_ARTIFACT,
                   below_version=get_artifact(session=session, name=SPLIT_ARTIFACT)[0])  # type: ignore[index]
    return labelled, skipped


def keep_carved_validation(*, session: Session, users: list[str], items: list[str], codes: np.ndarray,
                           run_id: str) -> None:
    """Store a run's carved validation labels as the party's own, beside its test labels: every later run, warm
    or cold, whatever its seed, then scores the same validation pairs, so releases compare like with like."""
    labels = _labels(session)
    for u, i, c in zip(users, items, np.asarray(codes).tolist()):
        if c == SPLIT_CODES["valid"]:
            labels[(u, i)] = SPLIT_CODES["valid"]
    keys = sorted(labels)
    payload = pack_tree({"users": np.array([u for u, _ in keys], dtype=str),
                         "items": np.array([i for _, i in keys], dtype=str),
                         "codes": np.array([labels[k] for k in keys], dtype=np.int8)})
    put_artifact(session=session, name=SPLIT_ARTIFACT, kind="evaluation_split", payload=payload)
    prune_artifact(session=session, name=SPLIT_ARTIFACT,
                   below_version=get_artifact(session=session, name=SPLIT_ARTIFACT)[0])  # type: ignore[index]
    put_state(session=session, key=CARVE_KEY, value={"run_id": run_id})


def _labels(session: Session) -> dict[tuple[str, str], int]:
    found = get_artifact(session=session, name=SPLIT_ARTIFACT)
    if found is None:
        return {}
    tree = unpack_tree(found[1])
    return {(u, i): int(c) for u, i, c in zip(tree["users"].tolist(), tree["items"].tolist(), tree["codes"].tolist())}


def test_items_by_user(*, session: Session) -> dict[str, set[str]]:
    """user → items whose rating is labelled test (held out of training)."""
    out: dict[str, set[str]] = {}
    for (u, i), code in _labels(session).items():
        if code == SPLIT_CODES["test"]:
            out.setdefault(u, set()).add(i)
    return out


def all_user_ids(*, session: Session) -> list[str]:
    """External ids of every user this party knows."""
    return list(session.scalars(select(User.external_id).order_by(User.external_id)))


def all_item_ids(*, session: Session) -> list[str]:
    """External ids of this party's catalogue, in model order (sorted)."""
    return list(session.scalars(select(Item.external_id).order_by(Item.external_id)))


def load_ratings(*, session: Session) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Every rating as (user ids, item ids, ratings, split codes)."""
    rows = session.execute(select(User.external_id, Item.external_id, Interaction.rating)
                           .join(User, Interaction.user_id == User.id).join(Item, Interaction.item_id == Item.id))
    users, items, ratings = [], [], []
    for u, i, r in rows:
        users.append(u)
        items.append(i)
        ratings.append(r)
    labels = _labels(session)
    codes = np.array([labels.get((u, i), 0) for u, i in zip(users, items)], dtype=np.int8)
    return users, items, np.asarray(ratings, dtype=np.float32), codes
