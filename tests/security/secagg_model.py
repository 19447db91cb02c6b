"""Issue 39: a rogue coordinator as a model, played against real party objects (`FederationService` on real
SQLite databases, three parties outside dev mode with pinned identities).

`Attacker` is a Hypothesis state machine whose rules are the calls a coordinator holding only its token can
make to the parties, with any arguments: configure (any run id, seed), peers (any subset of the announcements,
a sybil), start (any item counts), begin (any participants; public parameters honest, nudged by an ulp, or new;
different parties told different things), masked steps (any participant list, to any subset), consistency (any
survivor set per party), recovery (any split, the collected signatures, forged "fresh" notes), total (any
participants), and restarting a party. Two macro rules play an honest set-up and an honest sum, so that the
search reaches deep sequences quickly.

`Knowledge` is the oracle. The parties' real values are recorded where they are masked (a spy around
`MaskedUpload.wrap`) or sent in the clear (`PlainUpload.wrap`), and every share the parties gave in recovery
answers is counted. From that, the coordinator's knowledge is modelled as the double-masking algebra allows:
for one masked step, a subset S of the uploads sums out when the coordinator holds at least t shares of every
member's self-mask seed, and for every pairwise mask between a member and a party outside S (or masked with
another set) the step key of one of the two. After every step the oracle checks, by linear algebra, that no
party's value, and no difference of two of one party's values, lies in the span of what the coordinator can
compute: exactly (values as symbols, an exact repeat being the same symbol) and numerically (a combination that
rebuilds the vector to 1e-4 relative, which catches values that differ by a nudge).

What it does not model: a coordinator that chooses inputs so that a party's value becomes predictable (e.g.
zero public parameters), and a party that colludes with the coordinator (docs/privacy.md §7.1).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis import target
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from services.crypto.secagg import SecAggParty, decode_fixed, encode_fixed
from services.db.session import make_engine, make_sessionmaker, migrate
from services.errors import DomainError
from services.federation.aggregation import MaskedUpload, PlainUpload, ValueLedger, participants_of
from services.federation.links import Step
from services.federation.messages import (
    ConfigureRequest,
    KeyAnnouncementModel,
    PeersRequest,
    StartRequest,
)
from services.party import fed_store as store
from services.party.fed_store import set_evaluation_split
from services.party.federation import FederationService
from services.party.ingest import ingest_records
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.secure import dev_party_secret
from tests.support.federation import TINY_CONFIG, tiny_parties

PIDS = ("p0", "p1", "p2")
RUN_IDS = ("ra", "rb")
SEEDS = (3, 4)
LABELS = (("projection", 0), ("projection", 1), ("finish", -1))
SYBIL = "p9"
CONFIG = {"protocol": "verfedgnn", **TrainConfig(**{**TINY_CONFIG, "secure_aggregation": True}).model_dump(
    exclude={"seed", "rounds", "projection_seed"})}
SUBSETS = [tuple(sorted(s)) for s in ({"p0", "p1"}, {"p0", "p2"}, {"p1", "p2"}, {"p0", "p1", "p2"})]
TARGETS = [("p0",), ("p1",), ("p2",), *SUBSETS]  # which parties a call goes to


def _identity(pid: str) -> str:
    return SecAggParty(party_id=pid, secret=dev_party_secret(pid), run_id="any").identity


def build_template(root: Path) -> Path:
    """Three party databases with a tiny data set each, and an honest user alignment for every run id."""
    data = tiny_parties(3)
    common = sorted(set.intersection(*[set(map(str, d.train.user_ids.tolist())) for d in data.values()]))
    for pid, ds in data.items():
        url = f"sqlite:///{root / f'{pid}.db'}"
        migrate(url)
        engine = make_engine(url)
        sessions = make_sessionmaker(engine)
        with sessions() as session:
            held = [(ds.test, "test")] + ([(ds.valid, "valid")] if ds.valid is not None else [])
            rows = [{"user_id": str(u), "item_id": str(i), "rating": float(x)}
                    for r in [ds.train, *(h for h, _ in held)]
                    for u, i, x in zip(r.user_ids.tolist(), r.item_ids.tolist(), r.ratings.tolist())]
            ingest_records(session=session, records=rows, kind="interactions", rating_min=1.0, rating_max=5.0)
            labels = [(str(u), str(i), name) for r, name in held for u, i in zip(r.user_ids.tolist(),
                                                                                  r.item_ids.tolist())]
            set_evaluation_split(session=session, users=[u for u, _, _ in labels], items=[i for _, i, _ in labels],
                                 splits=[s for _, _, s in labels])
            for run_id in RUN_IDS:  # PSI is not what this test attacks: every run id starts aligned
                store.put_artifact(session=session, name=f"alignment:{run_id}", kind="alignment",
                                   payload=pack_tree({"user_ids": np.array(common, dtype=str)}), version=1)
        engine.dispose()  # the last connection closes: SQLite folds its write-ahead log into the file copied
    return root


# ---- the oracle -----------------------------------------------------------------------------------------
@dataclass
class Instance:
    """One masked step of one attempt, as the coordinator can attack it."""

    uploads: dict[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)  # pid -> (masked with, value)
    thresholds: dict[str, int] = field(default_factory=dict)
    seeds: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # owner -> who gave a share
    keys: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def known(self, shares: dict[str, set[str]], owner: str) -> bool:
        return len(shares.get(owner, ())) >= self.thresholds.get(owner, 1 << 30)

    def computable(self) -> Iterator[tuple[str, ...]]:
        """Every subset of the uploads whose sum the coordinator can unmask with the shares it holds."""
        pids = sorted(self.uploads)
        for bits in range(1, 1 << len(pids)):
            subset = [p for k, p in enumerate(pids) if bits >> k & 1]
            if all(self.known(self.seeds, u) and all(
                    (v in subset and u in self.uploads[v][0]) or self.known(self.keys, u) or self.known(self.keys, v)
                    for v in self.uploads[u][0] if v != u) for u in subset):
                yield tuple(subset)


@dataclass
class Knowledge:
    """What every party released, and what the coordinator can compute from it."""

    values: list[tuple[str, str, np.ndarray]] = field(default_factory=list)  # (pid, exact digest, value)
    instances: dict[tuple[str, int, int, str], Instance] = field(default_factory=lambda: defaultdict(Instance))
    plain: list[int] = field(default_factory=list)

    def value(self, pid: str, vector: np.ndarray) -> int:
        encoded = encode_fixed(vector)  # an exact repeat is the same symbol: the party's own ledger key
        self.values.append((pid, ValueLedger.digest(encoded), decode_fixed(encoded)))
        return len(self.values) - 1

    def learned(self) -> list[list[int]]:
        """Each computable sum as the list of value indices it adds up."""
        out = [[i] for i in self.plain]
        for inst in self.instances.values():
            out += [[inst.uploads[p][1] for p in subset] for subset in inst.computable()]
        return out

    def leak(self) -> str | None:
        """A party's value, or a difference of two of its values, in the span of what the coordinator holds."""
        sums = self.learned()
        if not sums:
            return None
        symbols = sorted({(p, d) for p, d, _ in self.values})
        index = {s: k for k, s in enumerate(symbols)}
        rows = np.zeros((len(sums), len(symbols)))
        for r, members in enumerate(sums):
            for i in members:
                rows[r, index[self.values[i][:2]]] += 1
        rank = np.linalg.matrix_rank(rows)
        targets: list[tuple[str, np.ndarray, str]] = []
        by_party: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for p, d in symbols:
            by_party[p].append((p, d))
        for p, own in by_party.items():
            for a in own:
                t = np.zeros(len(symbols))
                t[index[a]] = 1
                targets.append((p, t, "a value"))
                for b in own:
                    if b < a:
                        t2 = t.copy()
                        t2[index[b]] = -1
                        targets.append((p, t2, "a difference of two values"))
        for p, t, what in targets:
            if np.linalg.matrix_rank(np.vstack([rows, t])) == rank:
                return f"exactly: {what} of {p} is a combination of the sums {sums}"
        return self._numeric(sums)

    def _numeric(self, sums: list[list[int]]) -> str | None:
        """Numerically: a value (or a difference of one party's values) rebuilt to 1e-4 by a combination of sums."""
        vectors: dict[int, list[np.ndarray]] = defaultdict(list)
        for members in sums:
            v = sum(self.values[i][2] for i in members)
            vectors[v.size].append(v)
        for size, found in vectors.items():
            a = np.stack(found, axis=1)
            if a.shape[1] * 2 > size:  # too many sums for this size to tell a combination from chance
                continue
            own = [(p, v) for p, _, v in self.values if v.size == size]
            targets = [(p, v) for p, v in own] + [(p, v - w) for i, (p, v) in enumerate(own)
                                                   for q, w in own[:i] if q == p]
            for p, x in targets:
                norm = float(np.linalg.norm(x))
                if norm < 1e-9:
                    continue
                c, *_ = np.linalg.lstsq(a, x, rcond=None)
                if float(np.linalg.norm(a @ c - x)) <= 1e-4 * norm:
                    return f"numerically: a value of {p} (or a difference of two) is rebuilt from {len(found)} sums"
        return None


# ---- the attacker ---------------------------------------------------------------------------------------
@dataclass
class RunView:
    """What the coordinator holds about one run."""

    seed: int = 0
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    sealed: dict[str, dict[str, str]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    public: dict[str, np.ndarray] | None = None
    inbox: dict[tuple[int, int], dict[str, dict[str, str]]] = field(default_factory=dict)
    signatures: dict[tuple[int, int, str], dict[str, tuple[str, str]]] = field(default_factory=dict)
    last: tuple[int, int] | None = None  # the (round, attempt) the last whole round played
    first_totals: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # (party, layer) -> first sum


class Attacker(RuleBasedStateMachine):
    """A coordinator with its token and nothing else, against three real parties (see the module docstring)."""

    template: Path
    workdir: Path
    knowledge: Knowledge

    def __init__(self) -> None:
        super().__init__()
        here = self.workdir / f"ex{id(self)}"
        shutil.rmtree(here, ignore_errors=True)
        here.mkdir(parents=True)
        for pid in PIDS:
            shutil.copy(self.template / f"{pid}.db", here / f"{pid}.db")
        self.here = here
        self.services = {pid: self._service(pid) for pid in PIDS}
        self.runs: dict[str, RunView] = {}
        self.round = 0
        type(self).knowledge = Knowledge()  # the spies write here

    def _service(self, pid: str) -> FederationService:
        sessions = make_sessionmaker(make_engine(f"sqlite:///{self.here / f'{pid}.db'}"))
        return FederationService(sessions=sessions, party_id=pid, rating_min=1.0, rating_max=5.0,
                                 secret=dev_party_secret(pid), dev_mode=False,
                                 peer_identities={p: _identity(p) for p in PIDS if p != pid})

    def teardown(self) -> None:
        # the attacker's aim, for Hypothesis' targeted search: more unmasked sums over more distinct values
        learned = self.knowledge.learned()
        if currently_in_test_context():
            target(float(len(learned) + len({i for s in learned for i in s})), label="what the coordinator unmasked")
        for s in self.services.values():
            s.close()
        shutil.rmtree(self.here, ignore_errors=True)

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except DomainError:
            return None

    def _step(self, pid: str, run_id: str, step: Step, message: dict[str, Any]) -> dict[str, Any] | None:
        out = self._call(lambda: self.services[pid].step(run_id=run_id, step=step, body=pack_tree(message)))
        return None if out is None else unpack_tree(out)

    # ---- set-up ---------------------------------------------------------------------------------------
    @rule(run_id=st.sampled_from([RUN_IDS[0], *[RUN_IDS[1]] * 3]), seed=st.sampled_from(SEEDS),
          configure_at=st.sampled_from(SUBSETS),
          peers_at=st.sampled_from(TARGETS), sybil=st.booleans(), start_at=st.sampled_from(TARGETS))
    def setup(self, run_id: str, seed: int, configure_at: tuple[str, ...], peers_at: tuple[str, ...], sybil: bool,
              start_at: tuple[str, ...]) -> None:
        """configure, peers and start, each at any parties, with any announcements (a sybil's too)."""
        self.configure(run_id, seed, configure_at)
        self.peers(run_id, peers_at, sybil)
        self.start(run_id, start_at)

    def configure(self, run_id: str, seed: int, who: tuple[str, ...]) -> None:
        view = self.runs.setdefault(run_id, RunView(seed=seed))
        for pid in who:
            req = ConfigureRequest(run_id=run_id, config=CONFIG, seed=seed)
            a = self._call(lambda pid=pid, req=req: self.services[pid].configure(request=req))
            if a is not None:
                view.keys[pid], view.counts[pid] = a.key.model_dump(), a.n_items
                view.seed = seed

    def peers(self, run_id: str, who: tuple[str, ...], sybil: bool) -> None:
        view = self.runs.get(run_id)
        if view is None or not set(who) <= set(view.keys):
            return
        announced = [KeyAnnouncementModel(**view.keys[p]) for p in who]
        if sybil:
            a = SecAggParty(party_id=SYBIL, secret=b"sybil-secret-xx!" * 2, run_id=run_id).announce()
            announced.append(KeyAnnouncementModel(party_id=a.party_id, dh_public=a.dh_public, identity=a.identity,
                                                  signature=a.signature))
        for pid in who:
            out = self._call(lambda pid=pid: self.services[pid].peers(run_id=run_id,
                                                                      request=PeersRequest(announcements=announced)))
            if out is not None:
                view.sealed[pid] = dict(out.sealed)

    def start(self, run_id: str, who: tuple[str, ...]) -> None:
        view = self.runs.get(run_id)
        if view is None or not set(who) <= set(view.counts):
            return
        counts = {p: view.counts[p] for p in who}
        for pid in who:
            sealed = {s: box[pid] for s, box in view.sealed.items() if s != pid and pid in box and s in who}
            req = StartRequest(total_items=sum(counts.values()), item_counts=counts, global_mean=3.5, sealed=sealed)
            if self._call(lambda pid=pid, req=req: self.services[pid].start(run_id=run_id, request=req)) is not None:
                view.started.add(pid)
        if view.public is None:
            coord = CoordinatorTrainer(config=TrainConfig(**{k: v for k, v in CONFIG.items() if k != "protocol"},
                                                          seed=view.seed, rounds=1),
                                       n_users=len(self._aligned()), global_mean=3.5, item_counts=view.counts)
            view.public = coord.public_params()

    def _aligned(self) -> list[str]:
        with self.services["p0"].sessions() as session:
            found = store.get_artifact(session=session, name=f"alignment:{RUN_IDS[0]}")
        assert found is not None
        return [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]

    @initialize()
    def first_run(self) -> None:
        """Every search starts with one run set up honestly, as every probe did; the other run id is free."""
        self.honest_setup(RUN_IDS[0], SEEDS[0])

    @rule(run_id=st.sampled_from(RUN_IDS), seed=st.sampled_from(SEEDS))
    def honest_setup(self, run_id: str, seed: int) -> None:
        """configure → peers → start at all three, as an honest coordinator would."""
        self.configure(run_id, seed, PIDS)
        self.peers(run_id, PIDS, False)
        self.start(run_id, PIDS)

    # ---- rounds ---------------------------------------------------------------------------------------
    def _public(self, view: RunView, kind: int) -> dict[str, np.ndarray]:
        assert view.public is not None
        public = {k: v.copy() for k, v in view.public.items()}
        if kind:  # nudged (kind 1), doubled (2) or drawn anew (3) at user 0
            flat = public["user_emb"].reshape(-1)  # what every layer reads
            if kind == 3:
                flat[:] = np.random.default_rng(self.round).normal(size=flat.size).astype(np.float32) * 0.1
            else:
                # kinds 1 and 2: every user scaled by 1 ± 2^-16, nudges that survive the fixed-point encoding (an
                # ulp at one user may not)
                flat *= np.float32(1 + 2 ** -16 if kind == 1 else 1 - 2 ** -16)
        return public

    @rule(run_id=st.sampled_from(RUN_IDS), rnd=st.integers(0, 2), attempt=st.integers(0, 1),
          names=st.sampled_from(SUBSETS), kinds=st.tuples(*[st.integers(0, 3)] * 3), skip=st.sampled_from(("",) + PIDS))
    def begin(self, run_id: str, rnd: int, attempt: int, names: tuple[str, ...], kinds: tuple[int, int, int],
              skip: str) -> None:
        """A round attempt begins at the participants (one may be left out; each may get other parameters)."""
        view = self.runs.get(run_id)
        if view is None or view.public is None:
            return
        self.round += 1
        inbox: dict[str, dict[str, str]] = defaultdict(dict)
        for k, pid in enumerate(names):
            if pid == skip:
                continue
            out = self._step(pid, run_id, Step("begin", rnd, attempt),
                             {"public": self._public(view, kinds[k]), "participants": list(names)})
            for recipient, box in ((out or {}).get("secagg") or {}).get("sealed", {}).items():
                inbox[str(recipient)][pid] = str(box)
        view.inbox[(rnd, attempt)] = dict(inbox)

    def _masked(self, run_id: str, rnd: int, attempt: int, label: int, names: tuple[str, ...],
                to: tuple[str, ...]) -> None:
        view = self.runs[run_id]
        name, layer = LABELS[label]
        inbox = view.inbox.get((rnd, attempt), {})
        for pid in to:
            self._step(pid, run_id, Step(name, rnd, attempt, layer),
                       {"participants": list(names), "sealed_in": inbox.get(pid, {})})

    @rule(run_id=st.sampled_from(RUN_IDS), rnd=st.integers(0, 2), attempt=st.integers(0, 1),
          label=st.integers(0, 2), names=st.sampled_from(SUBSETS), to=st.sampled_from(TARGETS))
    def masked_step(self, run_id: str, rnd: int, attempt: int, label: int, names: tuple[str, ...],
                    to: tuple[str, ...]) -> None:
        """A summed step sent to some parties (any participant list)."""
        if run_id in self.runs:
            self._masked(run_id, rnd, attempt, label, names, to)

    def _consistency(self, run_id: str, rnd: int, attempt: int, label: int,
                     split: dict[str, tuple[str, ...]]) -> None:
        view = self.runs[run_id]
        name, layer = LABELS[label]
        got = view.signatures.setdefault((rnd, attempt, f"{name}{layer}"), {})
        for pid, survivors in split.items():
            out = self._step(pid, run_id, Step(f"consistency:{name}", rnd, attempt, layer), {"survivors": list(survivors)})
            if out is not None:
                got[pid] = (str(out.get("signature", "")), str(out.get("repeat", "")))

    def _recovery(self, run_id: str, rnd: int, attempt: int, label: int, survivors: tuple[str, ...],
                  dropped: tuple[str, ...], to: tuple[str, ...], forge: bool) -> None:
        view = self.runs[run_id]
        name, layer = LABELS[label]
        got = view.signatures.get((rnd, attempt, f"{name}{layer}"), {})
        request = {"survivors": list(survivors), "dropped": list(dropped),
                   "signatures": {p: s for p, (s, _) in got.items()},
                   "repeats": {p: ("" if forge else r) for p, (_, r) in got.items()}}
        inst = self.knowledge.instances[(run_id, rnd, attempt, f"{name}|{layer}")]
        for pid in to:
            out = self._step(pid, run_id, Step(f"recovery:{name}", rnd, attempt, layer), request)
            for owner in (out or {}).get("seed", {}):
                inst.seeds[str(owner)].add(pid)
            for owner in (out or {}).get("key", {}):
                inst.keys[str(owner)].add(pid)

    @rule(run_id=st.sampled_from(RUN_IDS), rnd=st.integers(0, 2), attempt=st.integers(0, 1), label=st.integers(0, 2),
          told=st.tuples(*[st.sampled_from(TARGETS)] * 3), survivors=st.sampled_from(TARGETS),
          to=st.sampled_from(TARGETS), forge=st.booleans())
    def unmask(self, run_id: str, rnd: int, attempt: int, label: int, told: tuple[tuple[str, ...], ...],
               survivors: tuple[str, ...], to: tuple[str, ...], forge: bool) -> None:
        """Consistency (each party told any survivor set), then recovery with any split into survivors and
        dropped, showing the signatures collected (their fresh/repeat notes forged or not)."""
        if run_id in self.runs:
            self._consistency(run_id, rnd, attempt, label, dict(zip(PIDS, told)))
            dropped = tuple(p for p in PIDS if p not in survivors)
            self._recovery(run_id, rnd, attempt, label, survivors, dropped, to, forge)

    @rule(run_id=st.sampled_from(RUN_IDS), rnd=st.integers(0, 2), attempt=st.integers(0, 1), label=st.integers(0, 2),
          names=st.sampled_from(SUBSETS))
    def honest_sum(self, run_id: str, rnd: int, attempt: int, label: int, names: tuple[str, ...],
                   replay: bool = False) -> None:
        """One summed step played honestly over `names`: masked step, consistency, recovery (then total)."""
        if run_id not in self.runs:
            return
        self._masked(run_id, rnd, attempt, label, names, names)
        self._consistency(run_id, rnd, attempt, label, {p: names for p in names})
        dropped: tuple[str, ...] = ()  # honest: every party masked with survived
        self._recovery(run_id, rnd, attempt, label, names, dropped, names, False)
        if LABELS[label][0] == "projection":
            self.total(run_id, rnd, attempt, LABELS[label][1], names, replay)

    @rule(run_id=st.sampled_from([*[RUN_IDS[0]] * 3, RUN_IDS[1]]), retry=st.sampled_from([False, False, True]),
          names=st.sampled_from([*TARGETS, *[PIDS] * 4]),  # the whole set is what a coordinator mostly runs
          kind=st.integers(0, 3), finish_to=st.sampled_from(TARGETS), replay=st.booleans())
    def honest_round(self, run_id: str, retry: bool, names: tuple[str, ...], kind: int,
                     finish_to: tuple[str, ...], replay: bool = False) -> None:
        """A whole round over `names` played honestly (public parameters as `kind`, sums handed down as `total`
        with `replay`), except that the finish step goes to `finish_to` only (all of `names`: an honest round):
        the run's next round, or a new attempt of its last one."""
        view = self.runs.get(run_id)
        if view is None:
            return
        last = view.last
        rnd, attempt = (last[0], last[1] + 1) if retry and last else ((last[0] + 1 if last else 0), 0)
        view.last = (rnd, attempt)
        self.begin(run_id, rnd, attempt, names, (kind,) * 3, "")
        for label in range(len(LABELS) - 1):
            self.honest_sum(run_id, rnd, attempt, label, names, replay)
        self._masked(run_id, rnd, attempt, len(LABELS) - 1, names, finish_to)
        self._consistency(run_id, rnd, attempt, len(LABELS) - 1, {p: names for p in finish_to})
        dropped: tuple[str, ...] = ()  # honest: every party masked with survived
        self._recovery(run_id, rnd, attempt, len(LABELS) - 1, names, dropped, finish_to, False)

    @rule(run_id=st.sampled_from(RUN_IDS), rnd=st.integers(0, 2), attempt=st.integers(0, 1),
          layer=st.integers(0, 1), names=st.sampled_from(SUBSETS), replay=st.booleans())
    def total(self, run_id: str, rnd: int, attempt: int, layer: int, names: tuple[str, ...], replay: bool) -> None:
        """The sum handed down with any participant list: the sum of the uploads, or (replay) the first sum each
        party was handed for that layer in the run, so its next values come out nearly as before."""
        view = self.runs.get(run_id)
        inst = self.knowledge.instances.get((run_id, rnd, attempt, f"projection|{layer}"))
        size = next((self.knowledge.values[i][2].size for _, i in (inst.uploads.values() if inst else [])), None)
        if view is None or inst is None or size is None:
            return
        total = sum((self.knowledge.values[inst.uploads[p][1]][2] for p in names if p in inst.uploads),
                    np.zeros(size))
        for pid in names:
            sent = view.first_totals.get((pid, layer), total) if replay else total
            if self._step(pid, run_id, Step("total", rnd, attempt, layer),
                          {"total": sent, "participants": list(names)}) is not None:
                view.first_totals.setdefault((pid, layer), sent)

    @rule(run_id=st.sampled_from(RUN_IDS), seed=st.sampled_from(SEEDS), pid=st.sampled_from(PIDS))
    def alone(self, run_id: str, seed: int, pid: str) -> None:
        """A run of one: configure and start the party alone (a run that agreed keys with peers, or a new one),
        then a whole round over it alone."""
        self.configure(run_id, seed, (pid,))
        self.peers(run_id, (pid,), False)
        self.start(run_id, (pid,))
        self.honest_round(run_id, False, (pid,), 0, (pid,))

    @rule(pid=st.sampled_from(PIDS))
    def restart(self, pid: str) -> None:
        """The party process restarts: its in-memory state is gone, its database stays."""
        self.services[pid].close()
        self.services[pid] = self._service(pid)

    @invariant()
    def coordinator_learns_no_party_value(self) -> None:
        leak = self.knowledge.leak()
        assert leak is None, leak


def install_spies(patch: Callable[[Any, str, Any], None], machine: type[Attacker]) -> None:
    """Record every value a party masks or sends in the clear (the oracle's ground truth)."""
    masked_wrap, plain_wrap = MaskedUpload.wrap, PlainUpload.wrap

    def spy_masked(self: MaskedUpload, step: Step, message: dict[str, Any], contribution: Any) -> Any:
        out = masked_wrap(self, step, message, contribution)
        att = self._attempt
        assert att is not None
        label = f"{step.name}|{step.layer}"
        inst = machine.knowledge.instances[(self.secagg.run_id, step.round_index, step.attempt, label)]
        inst.uploads[self.party_id] = (participants_of(message),
                                       machine.knowledge.value(self.party_id, contribution.vector()))
        inst.thresholds[self.party_id] = att.threshold
        return out

    def spy_plain(self: PlainUpload, step: Step, message: dict[str, Any], contribution: Any) -> Any:
        out = plain_wrap(self, step, message, contribution)
        machine.knowledge.plain.append(machine.knowledge.value(f"plain:{step.name}", contribution.vector()))
        return out

    patch(MaskedUpload, "wrap", spy_masked)
    patch(PlainUpload, "wrap", spy_plain)
