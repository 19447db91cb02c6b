"""Right to erasure: one function removes a user from every table and every stored artifact of a party.

What a party keeps about a user, and what erasure does with it:
- tables: the user row, their interactions, social links and attribute values (side information) are deleted;
- the serving model (every stored version): the user's row of h_u and user_bias and their id are cut
  out, so predictions and recommendations answer 404;
- alignments of runs (`alignment:<run>`): the id is replaced by the empty tombstone "" (never a valid
  id), which keeps the shared row order of the other parties and matches no rating, so the next round
  of the run trains without the user; the in-memory run is dropped and rebuilt from the database;
- the evaluation split: the user's held-out (user, item) labels are removed;
- trainer checkpoints (`trainer:<run>`) hold this party's private item parameters and optimiser
  state, and the rows of its private users (users outside the run's intersection, with their ids):
  a private user's row and optimiser state are cut out and the run is dropped from memory, to be
  rebuilt without the user; the item parameters are kept: what the user's ratings already taught
  them, like what other parties aggregated, cannot be taken back (docs/privacy.md, section 8);
- in memory: a PSI in progress (it holds the user list) is abandoned, the serving cache is cleared,
  social sessions over the user are closed;
- on SQLite, secure_delete overwrites freed pages and the WAL is checkpointed and truncated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import delete, or_, select, text
from sqlalchemy.orm import Session

from models.rating_blend import cut_component_rows
from services.db.party_tables import Interaction, ModelArtifact, SocialLink, User
from services.db.session import is_write_conflict
from services.errors import Conflict, NotFound
from services.party.features import erase_user_features
from services.party.serving import mark_changed
from services.protocol.federation import pack_tree, unpack_tree
from services.protocol.social import SocialHost

if TYPE_CHECKING:
    from services.party.federation import FederationService
    from services.party.serving_cache import ModelCache

TOMBSTONE = ""  # replaces an erased id in a run's alignment; ids are never empty
PER_USER = ("user_ids", "h_u", "user_bias", "aligned")  # the serving model's arrays with one row per user


@dataclass(frozen=True)
class Erasure:
    """What an erasure removed."""

    external_id: str
    interactions_deleted: int
    social_links_deleted: int
    artifacts_rewritten: list[str] = field(default_factory=list)  # "name@version" of each rewritten artifact
    runs_reset: list[str] = field(default_factory=list)  # runs whose alignment or private users held the user


def _serving(tree: dict[str, Any], external_id: str) -> dict[str, Any] | None:
    """The serving model without the user's id, h_u row and user bias (None when absent)."""
    ids = tree["user_ids"]
    keep = ids != external_id
    if keep.all():
        return None
    out = {k: (v[keep] if k in PER_USER else v) for k, v in tree.items()}
    if isinstance(tree.get("rating_component"), dict):  # the party's rating component has a row per user too
        out["rating_component"] = cut_component_rows(tree["rating_component"], keep)
    return out


def _alignment(tree: dict[str, Any], external_id: str) -> dict[str, Any] | None:
    ids = tree["user_ids"]
    if not (ids == external_id).any():
        return None
    return {**tree, "user_ids": np.where(ids == external_id, TOMBSTONE, ids).astype(str)}


def _trainer(tree: dict[str, Any], external_id: str) -> dict[str, Any] | None:
    """A trainer checkpoint without the user's private row (None when it holds none).

    A protocol keeps its private users under "private_users": their "ids" and tensors with one row per id
    (rows, optimizer moments); every array there with that many rows loses the user's row.
    """
    own = tree.get("private_users")
    if not isinstance(own, dict) or not isinstance(own.get("ids"), np.ndarray):
        return None
    ids = own["ids"]
    keep = ids != external_id
    if keep.all():
        return None
    n = ids.shape[0]

    def cut(node: Any) -> Any:
        if isinstance(node, np.ndarray):
            return node[keep] if node.ndim >= 1 and node.shape[0] == n else node
        if isinstance(node, dict):
            return {k: cut(v) for k, v in node.items()}
        if isinstance(node, list):
            return [cut(v) for v in node]
        return node

    return {**tree, "private_users": cut(own)}


def _split(tree: dict[str, Any], external_id: str) -> dict[str, Any] | None:
    keep = tree["users"] != external_id
    if keep.all():
        return None
    return {k: v[keep] for k, v in tree.items()}


REWRITERS: dict[str, Callable[[dict[str, Any], str], dict[str, Any] | None]] = {
    "serving_model": _serving, "alignment": _alignment, "evaluation_split": _split, "trainer_state": _trainer}


def _rewrite_artifacts(session: Session, external_id: str) -> tuple[list[str], list[str]]:
    rewritten, runs = [], []
    for row in session.scalars(select(ModelArtifact).where(ModelArtifact.kind.in_(REWRITERS))):
        if row.payload is None:
            continue
        # optimizer state may hold non-finite values (a checkpoint is read back as it was written)
        tree = REWRITERS[row.kind](unpack_tree(row.payload, finite=row.kind != "trainer_state"), external_id)
        if tree is None:
            continue
        row.payload = pack_tree(tree)
        rewritten.append(f"{row.name}@{row.version}")
        run_id = row.name.split(":", 1)[1] if row.kind in ("alignment", "trainer_state") else None
        if run_id is not None and run_id not in runs:
            runs.append(run_id)  # its in-memory state holds the user: rebuilt from the database
    return rewritten, runs


def erase_user(*, session: Session, external_id: str, federation: FederationService | None = None,
               cache: ModelCache | None = None, social: SocialHost | None = None) -> Erasure:
    """Remove a user from every table and stored artifact, atomically, then from the services' memory."""
    try:
        user = session.scalar(select(User).where(User.external_id == external_id))
        features = erase_user_features(session=session, external_id=external_id)  # side information goes too
        if user is None and not features:
            raise NotFound(f"unknown user {external_id!r}", extra={"field": "external_id"})
        if user is None:  # attributes of a user with no interaction here: they were all the party held
            session.commit()
            _checkpoint(session)
            return Erasure(external_id, 0, 0)
        inter = session.execute(delete(Interaction).where(Interaction.user_id == user.id))
        links = session.execute(delete(SocialLink).where(
            or_(SocialLink.src_user_id == user.id, SocialLink.dst_user_id == user.id)))
        session.execute(delete(User).where(User.id == user.id))
        rewritten, runs = _rewrite_artifacts(session, external_id)
        mark_changed(session=session)  # every serving process rebuilds without the user
        session.commit()
    except Exception as exc:
        session.rollback()
        if is_write_conflict(exc):  # an upload for this user committed in between: erase again
            raise Conflict("a concurrent upload wrote data of this user; nothing was erased, retry it",
                           extra={"retryable": True}) from exc
        raise
    except BaseException:
        session.rollback()
        raise
    report = Erasure(external_id, int(inter.rowcount or 0), int(links.rowcount or 0),  # type: ignore[attr-defined]
                     rewritten, runs)
    if federation is not None:
        federation.forget(runs=runs)
    if cache is not None:
        cache.forget_user(external_id)  # this process answers 404 at once, before its rebuild
    if social is not None:
        social.forget(external_id)
    _checkpoint(session)
    return report


CHECKPOINT_DEADLINE_S = 10.0


def _checkpoint(session: Session) -> None:
    """SQLite: move the WAL into the database file (whose freed pages secure_delete zeroed) and truncate it.

    A reader elsewhere (another worker's serving refresh) can keep the checkpoint from completing, which
    would leave the pages from before the erasure in the database file: it is retried until it completes,
    within a deadline.
    """
    if session.get_bind().dialect.name != "sqlite":
        return
    session.commit()
    end = time.monotonic() + CHECKPOINT_DEADLINE_S
    while True:
        busy = session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).first()
        session.commit()
        if busy is None or not busy[0] or time.monotonic() > end:
            return
        time.sleep(0.05)
