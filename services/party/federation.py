"""Party-side federation use cases: PSI steps, one PartyTrainer per run, idempotent step cache, snapshots."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from services.crypto.psi import PsiParty
from services.crypto.secagg import SecAggParty
from services.errors import CryptoError, NotFound, ProtocolError, ValidationFailed
from services.party import fed_store as store
from services.party.serving import ServingModel, publish
from services.protocol.arrays import decode_array, encode_array
from services.protocol.federation import decode_points, encode_points, pack_tree, unpack_tree
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.messages import (
    ConfigureRequest,
    ConfigureResponse,
    KeyAnnouncementModel,
    PeersRequest,
    PeersResponse,
    StartRequest,
    StartResponse,
    encode_upload,
)
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.private_data import training_data
from services.verfedgnn.secure import SecureParty, announcements_from, party_seeds, seeded_trainer
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import PartyData, build_party_data

KEEP_SNAPSHOTS = 3
PSI_TTL_S = 3600.0  # a PSI left unfinished this long is abandoned (it holds the user list and a secret)
MAX_PSI = 8  # PSI sessions kept at once; the oldest is dropped first


def _bad(exc: Exception, what: str) -> ValidationFailed:
    return ValidationFailed(f"malformed {what}: {getattr(exc, 'detail', exc)}", extra={"field": "body"})


@dataclass
class _Run:
    """In-memory state of one run at this party."""

    run_id: str
    config: TrainConfig
    seed: int
    user_order: list[str]
    item_order: list[str]
    secagg: SecAggParty | None = None
    data: PartyData | None = None
    trainer: PartyTrainer | None = None
    secure: SecureParty | None = None
    done: int = -1  # last round this party finished (its snapshot exists)
    current: tuple[int, int] | None = None  # (round, attempt) in progress
    cache: dict[tuple[int, int, str, int], bytes] = field(default_factory=dict)


class FederationService:
    """Answers the coordinator's federation calls for one party (serialised by a lock)."""

    def __init__(self, *, sessions: sessionmaker[Session], party_id: str, rating_min: float,
                 rating_max: float, secret: bytes | None = None, peer_identities: Mapping[str, str] | None = None
                 ) -> None:
        self.sessions = sessions
        self.party_id = party_id
        self._secret = secret
        self.peer_identities = dict(peer_identities or {})
        self.rating_min, self.rating_max = rating_min, rating_max
        self._lock = threading.RLock()
        self._psi: dict[str, tuple[float, PsiParty]] = {}  # run id -> (started, secret and own ids)
        self._runs: dict[str, _Run] = {}

    def forget(self, *, runs: list[str]) -> None:
        """After an erasure: abandon PSI in progress (it holds the user list) and drop the given runs from
        memory, so their next call rebuilds them from the rewritten alignment and the remaining ratings."""
        with self._lock:
            self._psi.clear()
            for run_id in runs:
                self._runs.pop(run_id, None)

    # ---- PSI -------------------------------------------------------------------------------
    def psi_start(self, *, run_id: str) -> bytes:
        """Draw a PSI secret for the run and return this party's singly-blinded user list."""
        with self._lock, self.sessions() as session:
            party = PsiParty.create(store.all_user_ids(session=session))
            self._expire_psi(keep=MAX_PSI - 1)
            self._psi[run_id] = (time.monotonic(), party)
            return encode_points(party.outgoing())

    def _expire_psi(self, *, keep: int = MAX_PSI) -> None:
        """PSI sessions hold the user list and a secret: dropped after PSI_TTL_S, the oldest past `keep`."""
        now = time.monotonic()
        for run_id in [r for r, (started, _) in self._psi.items() if now - started > PSI_TTL_S]:
            del self._psi[run_id]
        while len(self._psi) > keep:
            del self._psi[next(iter(self._psi))]

    def _psi_party(self, run_id: str) -> PsiParty:
        self._expire_psi()
        found = self._psi.get(run_id)
        if found is None:
            raise ProtocolError(f"no PSI in progress for run {run_id} (never started, finished or expired)")
        return found[1]

    def psi_reblind(self, *, run_id: str, body: bytes) -> bytes:
        """Raise another party's list to this party's secret, order kept."""
        with self._lock:
            party = self._psi_party(run_id)
            try:
                points = decode_points(body)
            except ProtocolError as exc:
                raise _bad(exc, "PSI points") from exc
            return encode_points(party.reblind(points))

    def psi_finish(self, *, run_id: str, body: bytes) -> int:
        """Map the intersection to own ids; store the alignment (users sorted by id at every party)."""
        with self._lock, self.sessions() as session:
            party = self._psi_party(run_id)
            try:
                tree = unpack_tree(body)
                own = [bytes(r) for r in np.asarray(tree["own"], np.uint8).reshape(-1, 32)]
                common = [bytes(r) for r in np.asarray(tree["intersection"], np.uint8).reshape(-1, 32)]
            except (ProtocolError, KeyError, ValueError) as exc:
                raise _bad(exc, "PSI result") from exc
            # Every party knows the ids of the intersection, so sorting by id is a shared order that
            # reveals nothing more and keeps runs reproducible (token order changes with the secrets).
            aligned = sorted(party.align(own, common))
            store.put_artifact(session=session, name=f"alignment:{run_id}", kind="alignment",
                               payload=pack_tree({"user_ids": np.array(aligned, dtype=str)}), version=1)
            del self._psi[run_id]
            return len(aligned)

    # ---- party secret and key agreement --------------------------------------------------------
    def secret(self, session: Session) -> bytes:
        """This party's long-lived secret: from its settings, else drawn once and kept in its database."""
        if self._secret is None:
            stored = store.get_state(session=session, key="party_secret")
            if not stored:
                stored = os.urandom(32).hex()
                store.put_state(session=session, key="party_secret", value=stored)
            self._secret = bytes.fromhex(str(stored))
        return self._secret

    def _check_identities(self, session: Session, announcements: list[KeyAnnouncementModel]) -> dict[str, str]:
        """Pinned identities from the settings, else trust on first use (kept; a later change is refused)."""
        pinned = dict(self.peer_identities)
        for a in announcements:
            if a.party_id == self.party_id or a.party_id in pinned:
                continue
            key = f"peer_identity:{a.party_id}"
            seen = store.get_state(session=session, key=key)
            if seen is None:
                store.put_state(session=session, key=key, value=a.identity)
                seen = a.identity
            pinned[a.party_id] = str(seen)
        return pinned

    def peers(self, *, run_id: str, request: PeersRequest) -> PeersResponse:
        """Verify every peer's signed key, derive the pairwise keys, seal this party's seed contribution."""
        with self._lock, self.sessions() as session:
            run = self._runs.get(run_id)
            if run is None or run.secagg is None:
                raise ProtocolError(f"run {run_id} is not configured at this party")
            ids = [a.party_id for a in request.announcements]
            if self.party_id not in ids or len(set(ids)) != len(ids):
                raise ProtocolError("the announcements must name this party once and every peer once")
            pinned = self._check_identities(session, request.announcements)
            run.secagg.accept(announcements_from([a.model_dump() for a in request.announcements]), pinned=pinned)
            value = store.get_state(session=session, key=f"run:{run_id}") or {}
            value["peers"] = [a.model_dump() for a in request.announcements]
            store.put_state(session=session, key=f"run:{run_id}", value=value)
            return PeersResponse(party_id=self.party_id, sealed=run.secagg.seal_contribution(run.seed))

    # ---- run lifecycle -----------------------------------------------------------------------
    def configure(self, *, request: ConfigureRequest) -> ConfigureResponse:
        """Load this party's data for the aligned users; announce M_p and the training-rating sums."""
        try:
            config = TrainConfig(**{**request.config, "seed": request.seed})
        except ValidationError as exc:
            raise ValidationFailed(f"invalid training config: {exc.errors()[0]['msg']}",
                                   extra={"field": "config"}) from exc
        with self._lock, self.sessions() as session:
            found = store.get_artifact(session=session, name=f"alignment:{request.run_id}")
            if found is None:
                raise ProtocolError(f"run {request.run_id} has no user alignment at this party (run PSI first)")
            users = [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]
            run = _Run(request.run_id, config, request.seed, users, store.all_item_ids(session=session))
            run.secagg = SecAggParty(party_id=self.party_id, secret=self.secret(session), run_id=request.run_id)
            data = self._load_data(session, run, total_items=1)
            store.put_state(session=session, key=f"run:{request.run_id}",
                            value={"config": request.config, "seed": request.seed, "start": None})
            self._runs[request.run_id] = run
            a = run.secagg.announce()
            return ConfigureResponse(party_id=self.party_id, n_users=len(users), n_items=len(run.item_order),
                                     train_count=len(data.train), train_sum=float(data.train.ratings.sum()),
                                     key=KeyAnnouncementModel(party_id=a.party_id, dh_public=a.dh_public,
                                                              identity=a.identity, signature=a.signature))

    def _load_data(self, session: Session, run: _Run, *, total_items: int) -> PartyData:
        users, items, ratings, codes = store.load_ratings(session=session)
        run.data = build_party_data(
            party_id=self.party_id, user_order=run.user_order, item_order=run.item_order, users=users,
            items=items, ratings=ratings, codes=codes, total_items=total_items,
            rating_min=self.rating_min, rating_max=self.rating_max)
        assert run.secagg is not None
        # DP runs: the training matrix is randomized here, before any count or message leaves the party
        run.data = training_data(run.data, config=run.config, local_seed=run.secagg.derived_seed("local", run.seed))
        return run.data

    def start(self, *, run_id: str, request: StartRequest) -> StartResponse:
        """Build the trainer with the public totals; restore the newest snapshot if one exists."""
        with self._lock, self.sessions() as session:
            run = self._runs.get(run_id)
            if run is None:
                raise ProtocolError(f"run {run_id} is not configured at this party")
            if request.item_counts.get(self.party_id) != len(run.item_order):
                raise ProtocolError("item_counts does not match this party's catalogue size")
            value = store.get_state(session=session, key=f"run:{run_id}") or {}
            if not value.get("peers") or run.secagg is None or not run.secagg.pair_keys:
                raise ProtocolError(f"run {run_id}: no key agreement yet (peers step)")
            value["start"] = request.model_dump()
            self._build_trainer(session, run, request)
            store.put_state(session=session, key=f"run:{run_id}", value=value)
            return StartResponse(party_id=self.party_id, restored_round=run.done)

    def _build_trainer(self, session: Session, run: _Run, request: StartRequest) -> None:
        data = self._load_data(session, run, total_items=request.total_items)
        assert run.secagg is not None
        try:
            seeds = party_seeds(run.secagg, run_seed=run.seed, sealed=request.sealed)
        except CryptoError as exc:
            raise ProtocolError(f"seed agreement failed: {exc.detail}") from exc
        run.trainer = seeded_trainer(config=run.config, data=data, seeds=seeds)
        run.secure = (SecureParty(trainer=run.trainer, secagg=run.secagg, item_counts=request.item_counts)
                      if run.config.secure_aggregation else None)
        snap = store.get_artifact(session=session, name=f"trainer:{run.run_id}")
        if snap is None:
            self._snapshot(session, run, round_index=-1)
        else:
            run.trainer.load_state_dict(load_state(snap[1]))
            run.done = snap[0] - 2
        run.current, run.cache = None, {}

    def _snapshot(self, session: Session, run: _Run, *, round_index: int) -> None:
        """Persist the trainer after a finished round (version = round + 2, so the initial state is 1)."""
        assert run.trainer is not None
        version = round_index + 2
        store.put_artifact(session=session, name=f"trainer:{run.run_id}", kind="trainer_state",
                           payload=dump_state(run.trainer.state_dict()), version=version)
        store.prune_artifact(session=session, name=f"trainer:{run.run_id}", below_version=version - KEEP_SNAPSHOTS + 1)
        run.done = round_index

    def _run(self, session: Session, run_id: str) -> _Run:
        """The run, rebuilt from the database after a restart of this party."""
        run = self._runs.get(run_id)
        if run is not None and run.trainer is not None:
            return run
        value = store.get_state(session=session, key=f"run:{run_id}")
        found = store.get_artifact(session=session, name=f"alignment:{run_id}")
        if not value or not value.get("start") or not value.get("peers") or found is None:
            raise NotFound(f"run {run_id} is not known at this party", extra={"field": "run_id"})
        users = [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]
        config = TrainConfig(**{**value["config"], "seed": value["seed"]})
        run = _Run(run_id, config, int(value["seed"]), users, store.all_item_ids(session=session))
        run.secagg = SecAggParty(party_id=self.party_id, secret=self.secret(session), run_id=run_id)
        run.secagg.accept(announcements_from(value["peers"]))  # verified (and pinned) when first received
        self._build_trainer(session, run, StartRequest(**value["start"]))
        self._runs[run_id] = run
        return run

    # ---- round steps (each answer cached per (round, attempt, step, layer)) --------------------
    @staticmethod
    def _plain(run: _Run) -> None:
        """A run with secure aggregation never answers an unmasked projection or upload."""
        if run.secure is not None:
            raise ProtocolError(f"run {run.run_id} uses secure aggregation: only masked steps are answered",
                                extra={"field": "run_id"})

    def _in_progress(self, run: _Run, round_index: int, attempt: int) -> PartyTrainer:
        if run.current != (round_index, attempt) or run.trainer is None:
            raise ProtocolError(f"round {round_index} attempt {attempt} is not in progress at {self.party_id} "
                                f"(current {run.current}, last finished {run.done})",
                                extra={"field": "round_index"})
        return run.trainer

    def begin(self, *, run_id: str, round_index: int, attempt: int, body: bytes) -> bool:
        """Receive the public parameters and start the round; returns True when answered from cache."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "begin", -1)
            if run.current == (round_index, attempt) and key in run.cache:
                return True
            if round_index < run.done:
                raise ProtocolError(f"stale round {round_index}: this party already finished round {run.done}",
                                    extra={"field": "round_index"})
            assert run.trainer is not None
            public = self._decode_public(body, run.trainer)
            if run.done >= round_index:  # a retried round: go back to the state before it
                snap = store.get_artifact(session=session, name=f"trainer:{run_id}", max_version=round_index + 1)
                if snap is None:
                    raise ProtocolError(f"no snapshot before round {round_index} to retry from")
                run.trainer.load_state_dict(load_state(snap[1]))
                run.done = snap[0] - 2
            if run.secure is not None:
                run.secure.begin(round_index=round_index, public=public)
            else:
                run.trainer.begin_round(round_index=round_index, public=public)
            run.current, run.cache = (round_index, attempt), {key: b""}
            return False

    @staticmethod
    def _decode_public(body: bytes, trainer: PartyTrainer) -> dict[str, np.ndarray]:
        """Public parameters must have exactly the model's names, shapes and float32 dtype."""
        try:
            public = unpack_tree(body)
        except ProtocolError as exc:
            raise _bad(exc, "public parameters") from exc
        expected = trainer.public.arrays()
        if not isinstance(public, dict) or set(public) != set(expected):
            raise ValidationFailed("public parameters must be exactly " + ", ".join(sorted(expected)),
                                   extra={"field": "body"})
        for name, arr in public.items():
            if not isinstance(arr, np.ndarray) or arr.shape != expected[name].shape or arr.dtype != np.float32:
                raise ValidationFailed(f"public parameter {name} must be float32 {expected[name].shape}",
                                       extra={"field": name})
        return public

    def projection(self, *, run_id: str, round_index: int, attempt: int, layer: int) -> bytes:
        """Y_p^k = Φ X_p^k as npy bytes."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "projection", layer)
            if key in run.cache:
                return run.cache[key]
            self._plain(run)
            trainer = self._in_progress(run, round_index, attempt)
            out = encode_array(trainer.layer_projection(layer=layer))
            run.cache[key] = out
            return out

    def others(self, *, run_id: str, round_index: int, attempt: int, layer: int, body: bytes) -> bool:
        """Take the relayed sum of the other parties' projections for a layer; True when cached."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "others", layer)
            if key in run.cache:
                return True
            self._plain(run)
            trainer = self._in_progress(run, round_index, attempt)
            own = run.cache.get((round_index, attempt, "projection", layer))
            if own is None:
                raise ProtocolError(f"layer {layer}: projection not requested yet", extra={"field": "layer"})
            shape = decode_array(own).shape
            try:
                others = decode_array(body, dtype=np.float32, shape=shape)
            except ProtocolError as exc:
                raise _bad(exc, "projection sum") from exc
            trainer.receive_projection_sum(layer=layer, others=others)
            run.cache[key] = b""
            return False

    def finish(self, *, run_id: str, round_index: int, attempt: int) -> bytes:
        """Loss, private step, protected gradients; the state is persisted before answering."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "finish", -1)
            if key in run.cache:
                return run.cache[key]
            self._plain(run)
            trainer = self._in_progress(run, round_index, attempt)
            out = encode_upload(trainer.finish_round())
            self._snapshot(session, run, round_index=round_index)
            run.cache[key] = out
            return out

    # ---- masked round steps (secure aggregation) --------------------------------------------------
    def _secure(self, run: _Run, round_index: int, attempt: int) -> SecureParty:
        self._in_progress(run, round_index, attempt)
        if run.secure is None:
            raise ProtocolError(f"run {run.run_id} does not use secure aggregation", extra={"field": "run_id"})
        return run.secure

    def masked_projection(self, *, run_id: str, round_index: int, attempt: int, layer: int,
                          participants: list[str]) -> bytes:
        """Y_p^k in fixed point plus this party's pairwise masks (npy uint64)."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "masked:" + ",".join(sorted(participants)), layer)
            if key in run.cache:
                return run.cache[key]
            if any(k[2].startswith("masked:") and k[3] == layer for k in run.cache if k[:2] == (round_index, attempt)):
                # one masking per value: two maskings over different sets would differ by known masks only
                raise ProtocolError(f"layer {layer} was already masked for other participants",
                                    extra={"field": "participants"})
            secure = self._secure(run, round_index, attempt)
            out = encode_array(secure.masked_projection(round_index=round_index, attempt=attempt, layer=layer,
                                                        participants=participants))
            run.cache[key] = out
            return out

    def total(self, *, run_id: str, round_index: int, attempt: int, layer: int, body: bytes) -> bool:
        """The unmasked sum of the participants' projections; True when answered from the cache."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "total", layer)
            if key in run.cache:
                return True
            secure = self._secure(run, round_index, attempt)
            try:
                tree = unpack_tree(body)
                total = np.asarray(tree["total"], dtype=np.float64)
                names = [str(p) for p in np.asarray(tree["participants"]).tolist()]
            except (ProtocolError, KeyError, ValueError, TypeError) as exc:
                raise _bad(exc, "projection total") from exc
            if not np.isfinite(total).all():
                raise ValidationFailed("projection total is not finite", extra={"field": "body"})
            secure.total(layer=layer, total=total, participants=names)
            run.cache[key] = b""
            return False

    def masked_finish(self, *, run_id: str, round_index: int, attempt: int, participants: list[str]) -> bytes:
        """Private step; gradients, loss and metric sums in fixed point plus masks; state persisted first."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            key = (round_index, attempt, "masked-finish:" + ",".join(sorted(participants)), -1)
            if key in run.cache:
                return run.cache[key]
            if any(k[2].startswith("masked-finish:") for k in run.cache if k[:2] == (round_index, attempt)):
                raise ProtocolError("finish was already masked for other participants", extra={"field": "participants"})
            secure = self._secure(run, round_index, attempt)
            out = encode_array(secure.masked_finish(round_index=round_index, attempt=attempt,
                                                    participants=participants))
            self._snapshot(session, run, round_index=round_index)
            run.cache[key] = out
            return out

    def recovery(self, *, run_id: str, round_index: int, attempt: int, step: str, layer: int,
                 dropped: list[str], size: int) -> bytes:
        """This party's masks with parties that dropped out of a masked step (npy uint64)."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            secure = self._secure(run, round_index, attempt)
            return encode_array(secure.recovery(round_index=round_index, attempt=attempt, step=step, layer=layer,
                                                dropped=dropped, size=size))

    def publish(self, *, run_id: str, round_index: int) -> int:
        """Store the latest completed forward as the serving model; returns its version."""
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            assert run.trainer is not None
            sm: dict[str, Any] = run.trainer.serving_model()
            n, m = len(run.user_order), len(run.item_order)
            model = ServingModel(
                run_id=run_id, round_index=round_index, user_ids=np.array(run.user_order, dtype=str),
                item_ids=np.array(run.item_order, dtype=str),
                h_u=np.asarray(sm["user_repr"], np.float32), h_v=np.asarray(sm["item_repr"], np.float32),
                user_bias=np.asarray(sm.get("user_bias", np.zeros(n)), np.float32).reshape(n),
                item_bias=np.asarray(sm.get("item_bias", np.zeros(m)), np.float32).reshape(m),
                global_bias=float(np.asarray(sm.get("global_bias", 0.0)).reshape(-1)[0]),
                rating_min=self.rating_min, rating_max=self.rating_max,
                rank_bias=np.asarray(sm["rank_bias"], np.float32).reshape(m) if "rank_bias" in sm else None,
                rating_dim=int(sm.get("rating_dim", 0)))
            return publish(session=session, model=model)
