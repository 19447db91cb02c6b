"""Party-side federation use cases: PSI steps, one PartyTrainer per run, idempotent step cache, snapshots."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from services.crypto.double_mask import threshold_for
from services.crypto.psi import PsiParty
from services.crypto.secagg import SecAggParty
from services.errors import CryptoError, NotFound, ProtocolError, ValidationFailed
from services.federation import registry
from services.federation.aggregation import (
    CONSISTENCY,
    MIN_MASKED,
    RECOVERY,
    VALUE_PREFIX,
    MaskedUpload,
    ValueLedger,
    participants_of,
    party_aggregation,
    secure_run,
)
from services.federation.cluster import Cluster
from services.federation.links import Step
from services.federation.messages import (
    ConfigureRequest,
    ConfigureResponse,
    KeyAnnouncementModel,
    PeersRequest,
    PeersResponse,
    StartRequest,
    StartResponse,
    WarmStartRef,
    announcements_from,
)
from services.federation.plan import (
    SPLIT_CODES,
    PartySide,
    ProtocolPlan,
    RatingTable,
    RunContract,
    Seeds,
)
from services.federation.validation import carve_validation
from services.federation.warm import row_map
from services.party import fed_store as store
from services.party.dp_policy import DpPolicy, check_dp_request
from services.party.features import load_features
from services.party.rating_component import served_valid_sums, with_component
from services.party.serving import ServingModel, publish, release_model
from services.party.step_checks import check_participants_size, strict_config
from services.protocol.federation import decode_points, encode_points, pack_tree, unpack_tree

KEEP_SNAPSHOTS = 3
MIN_REPORT_USERS = 10  # a value-report slice with fewer validation users is left out (too few to mean anything)
BEST_MODEL, BEST_TRAINER = "best-model:", "best-trainer:"  # + run id: the kept best round (version = round + 2)
log = logging.getLogger("fedrec.party")
PSI_TTL_S = 3600.0  # a PSI left unfinished this long is abandoned (it holds the user list and a secret)
MAX_PSI = 8  # PSI sessions kept at once; the oldest is dropped first


def _bad(exc: Exception, what: str) -> ValidationFailed:
    return ValidationFailed(f"malformed {what}: {getattr(exc, 'detail', exc)}", extra={"field": "body"})


@dataclass
class _Run:
    """In-memory state of one run at this party."""

    run_id: str
    plan: ProtocolPlan
    config: Any
    seed: int
    user_order: list[str]
    item_order: list[str]
    secagg: SecAggParty | None = None
    data: Any = None
    side: PartySide | None = None
    done: int = -1  # last round this party finished (its snapshot exists)
    current: tuple[int, int] | None = None  # (round, attempt) in progress
    last: tuple[int, int, str, int] | None = None  # the latest step answered (a recovery may follow only it)
    published: dict[int, ServingModel] = field(default_factory=dict)  # round -> model with its component (a retry reuses it)
    published_value: list[dict[str, Any]] = field(default_factory=list)  # that model's value-report rows
    cache: dict[tuple[int, int, str, int], bytes] = field(default_factory=dict)
    warm: WarmStartRef | None = None  # the release a warm run starts from
    aggregation: Any = None  # the run's party-side aggregation strategy (built at start)
    masked_saved: Any = None  # the masked-value record last persisted (written again only when it changes)


def _close_side(run: _Run | None) -> None:
    """Stop what a run's party side runs beside this process (distributed training workers), if anything."""
    close = getattr(run.side, "close", None) if run is not None else None
    if close is not None:
        close()


class FederationService:
    """Answers the coordinator's federation calls for one party (serialised by a lock)."""

    def __init__(self, *, sessions: sessionmaker[Session], party_id: str, rating_min: float,
                 rating_max: float, secret: bytes | None = None, peer_identities: Mapping[str, str] | None = None,
                 dp_policy: DpPolicy | None = None, feedback: Literal["explicit", "implicit"] = "explicit",
                 cluster: Cluster | None = None, dev_mode: bool = False, use_features: bool = True) -> None:
        self.sessions = sessions
        self.dev_mode = dev_mode  # trust on first use of unpinned peer identities: dev mode only
        self.use_features = use_features  # PARTY_USE_FEATURES: runs use the party's attributes
        self.feedback = feedback
        self.party_id = party_id
        self._secret = secret
        self.peer_identities = dict(peer_identities or {})
        self.rating_min, self.rating_max = rating_min, rating_max
        self.dp_policy = dp_policy
        self.cluster = cluster or Cluster()  # PARTY_TRAIN_WORKERS > 1: runs train on torch.distributed
        self._lock = threading.RLock()
        self._psi: dict[str, tuple[float, PsiParty]] = {}  # run id -> (started, secret and own ids)
        self._runs: dict[str, _Run] = {}
        self._ledger: ValueLedger | None = None  # every value this party masked, and for which set (all runs)

    def ledger(self, session: Session) -> ValueLedger:
        """The party-wide record of masked values, loaded once from the database (it outlives restarts)."""
        if self._ledger is None:
            self._ledger = ValueLedger(store.states_with_prefix(session=session, prefix=VALUE_PREFIX))
        return self._ledger

    def forget(self, *, runs: list[str], psi: bool = True) -> None:
        """After an erasure: abandon PSI in progress (it holds the user list) and drop the given runs from
        memory, so their next call rebuilds them from the rewritten alignment and the remaining ratings
        (after a release prune, `psi=False`: only the pruned runs go)."""
        with self._lock:
            if psi:
                self._psi.clear()
            for run_id in runs:
                _close_side(self._runs.pop(run_id, None))

    def close(self) -> None:
        """The party stops: every run's distributed training workers leave (runs rebuild from the database)."""
        with self._lock:
            for run in self._runs.values():
                _close_side(run)

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

    def psi_check(self, *, run_id: str) -> None:
        """Conflict unless a PSI session is open for the run; the routes ask before reading a body."""
        with self._lock:
            self._psi_party(run_id)

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
            except (ProtocolError, KeyError, ValueError, TypeError) as exc:  # TypeError: not a dict of arrays
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

    def _check_identities(self, session: Session, announcements: list[KeyAnnouncementModel],
                          fixed: list[str] | None) -> dict[str, str]:
        """Pinned identities (PARTY_PEER_IDENTITIES): no other id is accepted. None pinned: trust on first
        use (kept; a later change is refused), in dev mode only. A run's peer set is fixed at its first key
        agreement: a repeated one (a coordinator retrying without a failed party) may only leave parties out."""
        pinned = dict(self.peer_identities)
        ids = [a.party_id for a in announcements if a.party_id != self.party_id]
        unpinned = [p for p in ids if p not in pinned]
        if pinned and unpinned:
            raise ProtocolError(f"pinned identities: {unpinned} not pinned (PARTY_PEER_IDENTITIES pins "
                                f"{sorted(pinned)}), no other id is accepted", extra={"field": "announcements"})
        if fixed is not None and not set(ids) <= set(fixed):
            raise ProtocolError(f"the peer set was fixed at configuration: {sorted(set(ids) - set(fixed))} "
                                f"not in {sorted(fixed)}", extra={"field": "announcements"})
        if unpinned and not self.dev_mode:
            raise ProtocolError(f"the identities of {unpinned} are not pinned: outside dev mode every peer's identity "
                                "key must be pinned in PARTY_PEER_IDENTITIES (trust on first use is dev mode only)",
                                extra={"field": "announcements"})
        for a in announcements:  # dev mode: trust on first use
            if a.party_id == self.party_id or a.party_id in pinned:
                continue
            key = f"peer_identity:{a.party_id}"
            seen = store.get_state(session=session, key=key)
            if seen is None:
                store.put_state(session=session, key=key, value=a.identity)
                seen = a.identity
            pinned[a.party_id] = str(seen)
        return pinned

    @staticmethod
    def _check_peer_floor(ids: list[str], fixed: list[str] | None) -> None:
        """A key agreement names at least two parties, and a repeated one (leaving failed parties out) keeps at
        least the threshold of the set fixed at configuration: fewer could never form a masked sum, and a
        smaller set would be a way to a run of one."""
        floor = max(MIN_MASKED, threshold_for(len(fixed)) if fixed else 0)
        if len(set(ids)) < floor:
            raise ProtocolError(f"a key agreement needs at least {floor} parties"
                                + (f" (the threshold of the peer set fixed at configuration, {sorted(fixed)})"
                                   if fixed else "") + f", got {sorted(set(ids))}", extra={"field": "announcements"})

    def peers(self, *, run_id: str, request: PeersRequest) -> PeersResponse:
        """Verify every peer's signed key, derive the pairwise keys, seal this party's seed contribution."""
        with self._lock, self.sessions() as session:
            run = self._runs.get(run_id)
            if run is None or run.secagg is None:
                raise ProtocolError(f"run {run_id} is not configured at this party")
            ids = [a.party_id for a in request.announcements]
            if self.party_id not in ids or len(set(ids)) != len(ids):
                raise ProtocolError("the announcements must name this party once and every peer once")
            value = store.get_state(session=session, key=f"run:{run_id}") or {}
            fixed = value.get("peer_set")
            self._check_peer_floor(ids, fixed)
            pinned = self._check_identities(session, request.announcements, fixed)
            run.secagg.accept(announcements_from([a.model_dump() for a in request.announcements]), pinned=pinned)
            value["peers"] = [a.model_dump() for a in request.announcements]
            value["peer_set"] = sorted(ids) if fixed is None else fixed
            store.put_state(session=session, key=f"run:{run_id}", value=value)
            return PeersResponse(party_id=self.party_id, sealed=run.secagg.seal_contribution(run.seed))

    # ---- run lifecycle -----------------------------------------------------------------------
    @staticmethod
    def _config(plan: ProtocolPlan, raw: Mapping[str, Any], seed: int) -> Any:
        settings = {k: v for k, v in raw.items() if k not in ("protocol", "rounds", "seed")}
        try:
            config = plan.config(settings, seed=seed, rounds=1)
        except ValidationError as exc:
            raise ValidationFailed(f"invalid training config: {exc.errors()[0]['msg']}",
                                   extra={"field": "config"}) from exc
        strict_config(settings, config)  # as strict as the coordinator's run settings: no coerced types
        return config

    def configure(self, *, request: ConfigureRequest) -> ConfigureResponse:
        """Load this party's data (the aligned users, and its other users as private users where the protocol
        trains them); announce M_p and the aligned users' training-rating count and sum."""
        plan = registry.plan(registry.protocol_of(request.config))
        config = self._config(plan, request.config, request.seed)
        if not self.dev_mode and not plan.secure_by_default(config) and plan.secure_by_default(
                self._config(plan, {}, request.seed)):
            # the coordinator chooses the config: a party outside dev mode never uploads in the clear what its
            # protocol masks by default
            raise ProtocolError("secure aggregation is off in this run's config: outside dev mode a party masks "
                                "every sum its protocol masks by default", extra={"field": "config"})
        with self._lock, self.sessions() as session:
            found = store.get_artifact(session=session, name=f"alignment:{request.run_id}")
            if found is None:
                raise ProtocolError(f"run {request.run_id} has no user alignment at this party (run PSI first)")
            warm = None if request.warm_start is None else request.warm_start.model_dump()
            before = store.get_state(session=session, key=f"run:{request.run_id}")
            if before and (before.get("config"), before.get("seed"), before.get("warm_start")) != (
                    request.config, request.seed, warm):
                raise ProtocolError(f"run {request.run_id} is already configured (a run is configured once; only the "
                                    "same configuration is answered again)", extra={"field": "config"})
            users = [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]
            run = _Run(request.run_id, plan, config, request.seed, users, store.all_item_ids(session=session),
                       warm=request.warm_start)
            # the DP floor reads ε through the plan: a protocol that nests the setting is held to it too
            check_dp_request(policy=self.dp_policy, epsilon=RunContract(plan, config).dp_epsilon(), session=session,
                             n_users=len(users), n_items=len(run.item_order))
            nonce = int(before.get("nonce", 0)) if before else self._seed_nonce(session, request, plan, config)
            run.secagg = SecAggParty(party_id=self.party_id, secret=self.secret(session), run_id=request.run_id,
                                     nonce=nonce)
            data = self._load_data(session, run, total_items=1)
            if not before:  # a repeated configure changes nothing: the peer set, the start and the masks stay
                store.put_state(session=session, key=f"run:{request.run_id}",
                                value={"config": request.config, "seed": request.seed, "start": None,
                                       "warm_start": warm, "nonce": nonce})
            self._runs[request.run_id] = run
            a = run.secagg.announce()
            count, total = plan.announce(data)
            return ConfigureResponse(party_id=self.party_id, n_users=len(users), n_items=len(run.item_order),
                                     train_count=count, train_sum=total, user_rows=self._user_rows(session, run),
                                     key=KeyAnnouncementModel(party_id=a.party_id, dh_public=a.dh_public,
                                                              identity=a.identity, signature=a.signature))

    @staticmethod
    def _seed_nonce(session: Session, request: ConfigureRequest, plan: ProtocolPlan, config: Any) -> int:
        """How many masked runs this party configured with this seed before (kept in its database): a new run
        from a seed already used starts from other values, so its sums never repeat an earlier run's values
        (which the fresh-sums rule would refuse to unmask); a plain run masks nothing and keeps the seed's
        values (the masked run it is compared with is then the same training)."""
        if not plan.secure_by_default(config):
            return 0
        key = f"seed-runs:{request.seed}"
        earlier = list(store.get_state(session=session, key=key) or [])
        if request.run_id not in earlier:
            store.put_state(session=session, key=key, value=[*earlier, request.run_id])
        return earlier.index(request.run_id) if request.run_id in earlier else len(earlier)

    @staticmethod
    def _user_rows(session: Session, run: _Run) -> list[int] | None:
        """A warm run: each aligned user's row in the release's run (-1: new), from the two runs' alignments.

        Both alignments are the same at every party (sorted ids of the intersection), so every party sends
        the same map; it tells the coordinator which of its old rows continue, never an id.
        """
        if run.warm is None:
            return None
        found = store.get_artifact(session=session, name=f"alignment:{run.warm.run_id}")
        if found is None:  # this party was not in the release's run (or pruned it): it has no map to give
            return None
        return [int(r) for r in row_map(unpack_tree(found[1])["user_ids"].tolist(), run.user_order)]

    def _load_data(self, session: Session, run: _Run, *, total_items: int) -> Any:
        users, items, ratings, codes = store.load_ratings(session=session)
        assert run.secagg is not None
        table = RatingTable(np.asarray(users, dtype=object), np.asarray(items, dtype=object), ratings, codes)
        fraction = float(getattr(getattr(run.config, "train", run.config), "valid_fraction", 0.0) or 0.0)
        if fraction > 0 and not np.any(codes == SPLIT_CODES["valid"]):
            # The first carve is kept: later runs (warm or cold, any seed) score the same validation pairs.
            codes = carve_validation(table, fraction=fraction, seed=run.seed, party_id=self.party_id,
                                     aligned=run.user_order)
            store.keep_carved_validation(session=session, users=users, items=items, codes=codes, run_id=run.run_id)
            table = RatingTable(table.users, table.items, ratings, codes)
        # DP runs: the training matrix is randomized here, before any count or message leaves the party
        run.data = run.plan.load(config=run.config, party_id=self.party_id, table=table, user_order=run.user_order,
                                 item_order=run.item_order, total_items=total_items,
                                 rating_range=(self.rating_min, self.rating_max),
                                 local_seed=run.secagg.derived_seed("local", run.seed), feedback=self.feedback)
        if self.use_features:  # the plan decides whether its model takes attributes (VerFedGNN, outside DP runs)
            run.data = run.plan.with_features(run.data, config=run.config, user_order=run.user_order,
                                              item_order=run.item_order,
                                              users=load_features(session=session, kind="user"),
                                              items=load_features(session=session, kind="item"))
        return run.data

    def start(self, *, run_id: str, request: StartRequest) -> StartResponse:
        """Build the trainer with the public totals; restore the newest snapshot if one exists."""
        with self._lock, self.sessions() as session:
            run = self._runs.get(run_id)
            if run is None:
                raise ProtocolError(f"run {run_id} is not configured at this party")
            value = store.get_state(session=session, key=f"run:{run_id}") or {}
            # a federation of one (this party alone) has no peer to agree keys with and nothing to mask
            alone = set(request.item_counts) == {self.party_id}
            self._check_alone(alone, value)
            if not alone and (not value.get("peers") or run.secagg is None or not run.secagg.pair_keys):
                raise ProtocolError(f"run {run_id}: no key agreement yet (peers step)")
            peers = sorted(a["party_id"] for a in value.get("peers") or [])
            if not alone and sorted(request.item_counts) != peers:  # the participant universe: the authenticated peers
                raise ProtocolError(f"item_counts must name exactly the run's authenticated peers {peers} (the peer "
                                    "set fixed at configuration)", extra={"field": "item_counts"})
            if request.item_counts.get(self.party_id) != len(run.item_order):
                raise ProtocolError("item_counts does not match this party's catalogue size")
            value["start"] = request.model_dump()
            self._build(session, run, request)
            store.put_state(session=session, key=f"run:{run_id}", value=value)
            return StartResponse(party_id=self.party_id, restored_round=run.done)

    def _check_alone(self, alone: bool, value: Mapping[str, Any]) -> None:
        """A run of one uploads its values in the clear: dev mode only, and never a run that agreed keys with
        peers (a coordinator shrinking a run to one party would read that party's values)."""
        if alone and value.get("peer_set"):
            raise ProtocolError(f"this run agreed keys with {value['peer_set']}: it never runs with this party "
                                "alone", extra={"field": "item_counts"})
        if alone and not self.dev_mode:
            raise ProtocolError("a run of one party uploads its values in the clear: dev mode only (PARTY_DEV_MODE=1)",
                                extra={"field": "item_counts"})

    def _build(self, session: Session, run: _Run, request: StartRequest) -> None:
        data = self._load_data(session, run, total_items=request.total_items)
        assert run.secagg is not None
        try:
            seeds = Seeds(run.secagg.agreed_seed(run.seed, request.sealed), run.secagg.derived_seed("local", run.seed))
        except CryptoError as exc:
            raise ProtocolError(f"seed agreement failed: {exc.detail}") from exc
        value = store.get_state(session=session, key=f"run:{run.run_id}") or {}
        peers = sorted(a["party_id"] for a in value.get("peers") or [])

        def version(step: Step) -> int:
            return run.done + 2  # the trainer snapshot the round's values come from (rewound at begin)

        aggregation = party_aggregation(secure=secure_run(run.plan.secure_by_default(run.config), request.item_counts),
                                        secagg=run.secagg, parties=peers, configured=value.get("peer_set") or peers,
                                        version=version, ledger=self.ledger(session))
        if isinstance(aggregation, MaskedUpload):
            run.masked_saved = store.get_state(session=session, key=f"masked:{run.run_id}")
            aggregation.load(run.masked_saved or {})
        run.aggregation = aggregation
        _close_side(run)
        # ---- distributed training (services.verfedgnn.distributed): a plan that offers it, W > 1
        private = len(getattr(data, "private_user_ids", []))
        # the sharded trainer has no attribute nodes yet: a party with side information trains in one process
        featured = getattr(data, "user_features", None) is not None or getattr(data, "item_features", None) is not None
        if self.cluster.workers > 1 and hasattr(run.plan, "distributed_party") and featured:
            log.warning("run %s: this party's attributes train in one process (PARTY_TRAIN_WORKERS=%d applies to runs "
                        "without side information)", run.run_id, self.cluster.workers)
        elif self.cluster.workers > 1 and hasattr(run.plan, "distributed_party") and private:
            # the sharded trainer does not train users outside the intersection yet: this run uses one process
            log.warning("run %s: %d users outside the intersection, so this party trains in one process "
                        "(PARTY_TRAIN_WORKERS=%d applies to runs where every user is aligned)",
                        run.run_id, private, self.cluster.workers)
        if self.cluster.workers > 1 and hasattr(run.plan, "distributed_party") and not private and not featured:
            run.side = run.plan.distributed_party(config=run.config, data=data, seeds=seeds,
                                                  item_counts=request.item_counts, aggregation=aggregation,
                                                  cluster=self.cluster)
        else:
            run.side = run.plan.party(config=run.config, data=data, seeds=seeds, item_counts=request.item_counts,
                                      aggregation=aggregation)
        snap = store.get_artifact(session=session, name=f"trainer:{run.run_id}")
        if snap is None:
            if run.warm is not None:
                self._warm(session, run)
            self._snapshot(session, run, round_index=-1)
        else:
            run.side.restore(snap[1])
            run.done = snap[0] - 2
        run.current, run.cache = None, {}

    def _warm(self, session: Session, run: _Run) -> None:
        """Start the new trainer from the release's run: its last trainer snapshot, items mapped by id.

        A party that did not stage the release (or no longer holds its snapshot) starts its items cold.
        """
        assert run.warm is not None and run.side is not None
        model = release_model(session=session, release_id=run.warm.release_id)
        old = self._state_after(session, run.warm.run_id, run.warm.round_index)
        if model is None or old is None or model.run_id != run.warm.run_id:
            log.warning("run %s: release %s not held here; this party's items start cold", run.run_id,
                        run.warm.release_id)
            return
        try:
            run.plan.warm_party(run.side, state=old, item_rows=row_map(model.item_ids.tolist(), run.item_order))
        except ValueError as exc:
            raise ValidationFailed(f"cannot warm start from {run.warm.release_id}: {exc}",
                                   extra={"field": "warm_start"}) from exc

    @staticmethod
    def _state_after(session: Session, run_id: str, round_index: int) -> bytes | None:
        """The trainer snapshot a run took after `round_index`: kept as its best round, or still among its last."""
        for name in (f"{BEST_TRAINER}{run_id}", f"trainer:{run_id}"):
            found = store.get_artifact(session=session, name=name, max_version=round_index + 2)
            if found is not None and found[0] == round_index + 2:
                return found[1]
        return None

    def _snapshot(self, session: Session, run: _Run, *, round_index: int) -> None:
        """Persist the trainer after a finished round (version = round + 2, so the initial state is 1)."""
        assert run.side is not None
        version = round_index + 2
        store.put_artifact(session=session, name=f"trainer:{run.run_id}", kind="trainer_state",
                           payload=run.side.checkpoint(), version=version)
        store.prune_artifact(session=session, name=f"trainer:{run.run_id}", below_version=version - KEEP_SNAPSHOTS + 1)
        run.done = round_index

    def _run(self, session: Session, run_id: str) -> _Run:
        """The run, rebuilt from the database after a restart of this party."""
        run = self._runs.get(run_id)
        if run is not None and run.side is not None:
            return run
        value = store.get_state(session=session, key=f"run:{run_id}")
        found = store.get_artifact(session=session, name=f"alignment:{run_id}")
        alone = bool(value) and set((value.get("start") or {}).get("item_counts") or {}) == {self.party_id}
        if not value or not value.get("start") or not (value.get("peers") or alone) or found is None:
            raise NotFound(f"run {run_id} is not known at this party", extra={"field": "run_id"})
        users = [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]
        plan = registry.plan(registry.protocol_of(value["config"]))
        config = self._config(plan, value["config"], int(value["seed"]))
        run = _Run(run_id, plan, config, int(value["seed"]), users, store.all_item_ids(session=session),
                   warm=WarmStartRef(**value["warm_start"]) if value.get("warm_start") else None)
        run.secagg = SecAggParty(party_id=self.party_id, secret=self.secret(session), run_id=run_id,
                                 nonce=int(value.get("nonce", 0)))
        if not alone:
            run.secagg.accept(announcements_from(value["peers"]))  # verified (and pinned) when first received
        self._build(session, run, StartRequest(**value["start"]))
        self._runs[run_id] = run
        return run

    # ---- round steps: one entry for every protocol's steps, answers cached per step -------------------
    def step(self, *, run_id: str, step: Step, body: bytes) -> bytes:
        """Answer one step of a round (the protocol's handler); a repeated step gets the cached answer.

        "begin" opens a round attempt (going back to the snapshot before the round when it is retried);
        every other step belongs to the attempt in progress; "finish" persists the state before answering.
        """
        # Decoded before the lock: a large body costs its caller's request, not every other step's wait.
        try:
            message = unpack_tree(body) if body else {}
        except ProtocolError as exc:
            raise _bad(exc, f"{step.name} message") from exc
        if not isinstance(message, dict):
            raise ValidationFailed(f"the {step.name} message must be a tree of named values",
                                   extra={"field": "body"})
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            assert run.secagg is not None
            check_participants_size(message, configured=len(run.secagg.pair_keys) + 1)
            # consistency and recovery answers are not cached: a repeat of the same request gets the same answer
            # from the strategy, and another survivor set gets its refusal, not the first set's answer
            reveal = step.name.startswith((RECOVERY, CONSISTENCY))
            if not reveal and step.key in run.cache and (step.name != "begin"
                                                         or run.current == (step.round_index, step.attempt)):
                return run.cache[step.key]
            if step.name == "begin":
                self._begin_check(run, step)
            elif reveal and run.last != (
                    step.round_index, step.attempt, step.name.split(":", 1)[1], step.layer):
                # a recovery only while its step is the latest one: once the round moved on, the sum was formed
                raise ProtocolError(f"{step.name} is only answered right after that step, before any other",
                                    extra={"field": "step"})
            elif run.current != (step.round_index, step.attempt):
                raise ProtocolError(f"round {step.round_index} attempt {step.attempt} is not in progress at "
                                    f"{self.party_id} (current {run.current}, last finished {run.done})",
                                    extra={"field": "round_index"})
            if step.name == "begin":
                if isinstance(run.aggregation, MaskedUpload) and "participants" in message:  # before the trainer moves
                    retry = run.done >= step.round_index  # then the state goes back to the snapshot before the round
                    run.aggregation.check_begin(participants_of(message),
                                                version=step.round_index + 1 if retry else run.done + 2)
                self._rewind(session, run, step)
            assert run.side is not None
            answer = run.side.handler.handle(step, message)
            if isinstance(run.aggregation, MaskedUpload):
                # persisted, in one commit, before the answer leaves this party: which set each value was masked
                # for and which sum unmasked it (party-wide), and the run's per-version record; both outlive a restart
                changed: dict[str, Any] = {VALUE_PREFIX + k: v for k, v in run.aggregation.ledger.drain().items()}
                record = run.aggregation.export()
                if record != run.masked_saved:
                    changed[f"masked:{run.run_id}"] = record
                if changed:
                    store.add_states(session=session, values=changed)
                    run.masked_saved = record
            if step.name == "finish":
                self._snapshot(session, run, round_index=step.round_index)
            out = pack_tree(answer)
            if step.name == "begin":
                run.current, run.cache = (step.round_index, step.attempt), {}
            if not reveal:
                run.last = step.key
                run.cache[step.key] = out
            return out

    @staticmethod
    def _begin_check(run: _Run, step: Step) -> None:
        """A new attempt of a stale round is refused."""
        if step.round_index < run.done:
            raise ProtocolError(f"stale round {step.round_index}: this party already finished round {run.done}",
                                extra={"field": "round_index"})

    def _rewind(self, session: Session, run: _Run, step: Step) -> None:
        """A retried round goes back to the state before it."""
        if run.done >= step.round_index:  # a retried round: go back to the state before it
            snap = store.get_artifact(session=session, name=f"trainer:{run.run_id}", max_version=step.round_index + 1)
            if snap is None:
                raise ProtocolError(f"no snapshot before round {step.round_index} to retry from")
            assert run.side is not None
            run.side.restore(snap[1])
            run.done = snap[0] - 2

    def keep_best(self, *, run_id: str, round_index: int) -> int:
        """Keep the model of `round_index`, the run's best validation round so far, for its release.

        Asked by the coordinator right after that round, before the next begins: the serving model of the
        round's forward and the trainer's snapshot after it are copied (older kept ones replaced). The
        kept model is a serving-model artifact, so an erasure reaches it as it reaches published ones.
        """
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            if run.done != round_index:
                raise ProtocolError(f"round {round_index} is not this party's latest finished round "
                                    f"(last finished {run.done})", extra={"field": "round_index"})
            snap = store.get_artifact(session=session, name=f"trainer:{run_id}")
            if snap is None or snap[0] != round_index + 2:
                raise ProtocolError(f"no snapshot after round {round_index} at this party")
            version = round_index + 2
            for name, kind, payload in ((f"{BEST_MODEL}{run_id}", "serving_model",
                                         self._serving(run, round_index).to_bytes()),
                                        (f"{BEST_TRAINER}{run_id}", "trainer_state", snap[1])):
                store.put_artifact(session=session, name=name, kind=kind, payload=payload, version=version)
                store.prune_artifact(session=session, name=name, below_version=version)
            return version

    def publish(self, *, run_id: str, round_index: int,
                release_id: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Store the model of `round_index` as the serving model (staged under `release_id` when given): the
        latest finished round's, or the one kept for that round (`keep_best`); 409 for any other round.

        The party's local ranking is fitted here, on its own split beside that model (`ProtocolPlan.fit_local`),
        and stored with it; returns (version, the value report's rows: validation NDCG@10 per slice; none under
        DP, `value_withheld` says why).
        """
        with self._lock, self.sessions() as session:
            run = self._run(session, run_id)
            kept = store.get_artifact(session=session, name=f"{BEST_MODEL}{run_id}", max_version=round_index + 2)
            if kept is not None and kept[0] == round_index + 2:
                model = ServingModel.from_bytes(kept[1])
            elif round_index != run.done:
                raise ProtocolError(f"round {round_index} is neither this party's latest finished round ({run.done}) "
                                    "nor one it kept", extra={"field": "round_index"})
            else:
                model = self._serving(run, round_index)
            # the party's own rating component and local ranking, fitted here on its own data; kept per round, so a
            # publish the coordinator retries after its timeout does not fit again
            if round_index not in run.published:
                fitted, value = self._with_local(run, with_component(model, plan=run.plan, data=run.data,
                                                                        seed=run.seed))
                run.published, run.published_value = {round_index: fitted}, value
            model = run.published[round_index]
            return publish(session=session, model=model, release_id=release_id), run.published_value

    def _with_local(self, run: _Run, model: ServingModel) -> tuple[ServingModel, list[dict[str, Any]]]:
        """The model with the party's local ranking fitted beside it, and the value report's rows."""
        if run.data is None:
            return model, []
        local = run.plan.fit_local(run.data, fed_rows=lambda rows: np.stack([model.user_scores(int(r)) for r in rows])
                                   if len(rows) else np.zeros((0, len(model.item_ids))), seed=run.seed)
        if local is None:
            return model, []
        value = [] if self._dp_withheld(run) else [
            {"slice": f.slice, "users": f.users, "local_ndcg10": f.local, "federated_ndcg10": f.federated,
             "served_ndcg10": f.served} for f in local.figures if f.users >= MIN_REPORT_USERS]
        return replace(model, local=local.to_tree()), value

    def served_valid(self, *, run_id: str, round_index: int) -> tuple[float, int] | None:
        """(squared error, count) of the model published for `round_index` on this party's validation ratings,
        as served (the release gate compares them); None when there are none or the run withholds them (DP)."""
        with self._lock:
            run = self._runs.get(run_id)
            model = None if run is None else run.published.get(round_index)
            if model is None or run is None or self._dp_withheld(run):
                return None
            return served_valid_sums(model, plan=run.plan, data=run.data)

    def value_withheld(self, *, run_id: str) -> str | None:
        """Why this party's publish answers no validation figures for the run (None: it answers them)."""
        with self._lock:
            run = self._runs.get(run_id)
            return None if run is None else self._dp_withheld(run)

    @staticmethod
    def _dp_withheld(run: _Run) -> str | None:
        """Under whole-run DP, why the held-out figures stay here: they come from validation ratings the randomized
        response does not cover, so the run's ε would not bound what they tell (docs/privacy.md §7.3)."""
        if RunContract(run.plan, run.config).dp_epsilon() is None:
            return None
        return ("withheld: dp_epsilon set; a party's validation error sum and count and its NDCG@10 per slice come "
                "from held-out ratings outside the run's differential-privacy accounting")

    def _serving(self, run: _Run, round_index: int) -> ServingModel:
        """The serving model of the latest completed forward (the caller holds the lock)."""
        assert run.side is not None
        sm: dict[str, Any] = run.side.serving_model()
        # the party's private users (VerFedGNN) follow the aligned ones, as in the trainer's rows
        users = run.user_order + list(getattr(run.data, "private_user_ids", []))
        n, m = len(users), len(run.item_order)
        if np.asarray(sm["user_repr"]).shape[0] != n:
            raise ProtocolError(f"run {run.run_id}: the model has {np.asarray(sm['user_repr']).shape[0]} user rows, "
                                f"this party {n} users")
        return ServingModel(
            run_id=run.run_id, round_index=round_index, user_ids=np.array(users, dtype=str),
            item_ids=np.array(run.item_order, dtype=str),
            h_u=np.asarray(sm["user_repr"], np.float32), h_v=np.asarray(sm["item_repr"], np.float32),
            user_bias=np.asarray(sm.get("user_bias", np.zeros(n)), np.float32).reshape(n),
            item_bias=np.asarray(sm.get("item_bias", np.zeros(m)), np.float32).reshape(m),
            global_bias=float(np.asarray(sm.get("global_bias", 0.0)).reshape(-1)[0]),
            rating_min=self.rating_min, rating_max=self.rating_max,
            rank_bias=np.asarray(sm["rank_bias"], np.float32).reshape(m) if "rank_bias" in sm else None,
            rating_dim=int(sm.get("rating_dim", 0)), feedback=str(getattr(run.data, "feedback", "explicit")),
            aligned=np.arange(n) < len(run.user_order))
