"""Background execution of training runs: align → configure → rounds (with pause/resume) → publish."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from services.config import CoordinatorSettings
from services.coordinator import registry as parties_registry
from services.coordinator import releases as releases_store
from services.coordinator import runs
from services.coordinator.client import HttpLink, PartyClient, TrafficCounter
from services.coordinator.preflight import check_parties
from services.coordinator.psi import align_users
from services.coordinator.releases import ACTIVE, VALID_NDCG, VALID_RMSE, Releases
from services.errors import DomainError, PartyUnavailable, ValidationFailed
from services.federation import registry
from services.federation.aggregation import aggregation, secure_run
from services.federation.fanout import fan_out
from services.federation.messages import (
    ConfigureRequest,
    ConfigureResponse,
    PeersRequest,
    PeersResponse,
    StartRequest,
    StartResponse,
    WarmStartRef,
)
from services.federation.plan import Engine, RunContract
from services.protocol.tracing import bound_request_id

SPLITS = ("train", "valid", "test")
# answers by which a party declines a run for good (its own policy, settings it refuses): no retry
REFUSALS = ("policy_refused", "validation_failed")

log = logging.getLogger("fedrec.coordinator")

T = TypeVar("T")


def retry_clients(clients: Mapping[str, T], bound: Sequence[str] | None) -> dict[str, T]:
    """The parties a round attempt goes to: after a masked attempt failed, exactly the set its first summed step
    went to when every one of them is enabled (each may mask that round's value for that set only, so another
    set would be refused by them); otherwise every enabled party."""
    if bound and set(bound) <= set(clients):
        return {p: clients[p] for p in sorted(bound)}
    return dict(clients)


class Cancelled(Exception):
    """The run was cancelled or the coordinator is shutting down."""


# why a run's rounds ended before its cap: early stopping, or its time bound (--max-minutes)
STALLED, TIMED_OUT = "stopped early: no validation improvement", "stopped: its time bound (max_minutes) was reached"


class RunFailed(DomainError):
    """The run cannot go on: too few parties can take part, too few common users, or a wait ran out."""

    code = "run_failed"
    http_status = 409


def train_config(config: dict[str, Any], *, seed: int, rounds: int) -> Any:
    """The protocol's config of a run (the run's seed and rounds win); 422 naming the field if invalid."""
    try:
        return registry.plan(registry.protocol_of(config)).config(config, seed=seed, rounds=rounds)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValidationFailed(f"invalid config: {err['msg']}",
                               extra={"field": ".".join(["config", *(str(x) for x in err["loc"])])}) from exc


def run_contract(config: dict[str, Any], *, seed: int, rounds: int) -> RunContract:
    """A stored run's typed config bound to its protocol's plan (the contract the API reads); 422 if invalid."""
    return RunContract(registry.plan(registry.protocol_of(config)), train_config(config, seed=seed, rounds=rounds))


def epsilon_spent(config: RunContract, state: str) -> float | None:
    """ε the run has spent: 0 before any party answered, the whole run's ε once parties released anything.

    The randomized response is applied once, before the first count leaves a party, so a started
    run has spent all of it; None when the run has no differential privacy (no finite ε).
    """
    g = config.guarantee()
    if not math.isfinite(g.epsilon):
        return None
    return 0.0 if state in (runs.PENDING, runs.ALIGNING) else g.epsilon


def metrics_row(m: Any) -> dict[str, float]:
    """Flat, JSON-safe metrics of one round (NaN dropped)."""
    row: dict[str, float] = {"loss": m.loss, "upload_bytes": float(m.upload_bytes),
                             "upload_nonzeros": float(m.upload_nonzeros), "participants": float(len(m.participants))}
    for split in SPLITS:
        row[f"{split}_rmse"], row[f"{split}_mae"] = m.rmse.get(split, math.nan), m.mae.get(split, math.nan)
    for party, figures in m.per_party.items():
        for split in ("valid", "test"):
            row[f"{party}.{split}_rmse"] = figures.get(f"{split}_rmse", math.nan)
    row[VALID_NDCG] = getattr(m, "ndcg", {}).get("valid", math.nan)  # FedPerGNN's rounds rank nothing
    return {k: float(v) for k, v in row.items() if math.isfinite(v)}


def watched_figure(history: list[dict[str, float]], *, ranks: bool = False) -> str | None:
    """The validation figure early stopping and the kept best round follow: what the run's model serves.

    A run that trains the ranking objective (`ranks`: rank_weight > 0) serves top-K lists first, so its
    pooled NDCG@10 decides whenever a round has one, whatever the parties' feedback kind; the same model
    answers rating predictions too, at that round (one model, one kept round: the ranking figure wins).
    A rating-only run (rank_weight 0) follows the pooled RMSE. Either falls back to the other figure when
    its own is missing, and to none (no validation labels, or held-out sums withheld under DP).
    """
    for key in ((VALID_NDCG, VALID_RMSE) if ranks else (VALID_RMSE, VALID_NDCG)):
        if any(math.isfinite(m.get(key, math.nan)) for m in history):
            return key
    return None


def ranks(config: Any) -> bool:
    """Whether a run's engine config trains the ranking objective (its kept round then follows NDCG@10)."""
    train = getattr(config, "train", config)
    return float(getattr(train, "rank_weight", 0.0) or 0.0) > 0


def elapsed_minutes(created_at: datetime) -> float:
    """Minutes since a run was created (a stored naive time is UTC: SQLite drops the zone)."""
    start = created_at if created_at.tzinfo is not None else created_at.replace(tzinfo=UTC)
    return (datetime.now(UTC) - start).total_seconds() / 60.0


def progress(*, t: int, total: int, best_metrics: dict[str, float], best: tuple[int, float] | None,
             watched: str | None, patience: int, seconds: list[float], minutes_left: float | None) -> str:
    """The progress line of a run after round t: the best validation figures, and what is left at most.

    What is left: the rounds to the cap, or to `patience` rounds past the best round (where the run stops
    unless validation improves), or to the time bound, whichever comes first, at the mean round time so far.
    """
    line = f"round {t + 1}/{total} done"
    if best is not None:
        m = best_metrics
        figs = ", ".join(f"{name} {m[k]:.4f}" for k, name in ((VALID_NDCG, "NDCG@10"), (VALID_RMSE, "RMSE"))
                         if k in m)
        line += f"; best validation round {best[0]} ({figs}; kept by {'NDCG@10' if watched == VALID_NDCG else 'RMSE'})"
    stop_by = total if best is None else min(total, best[0] + patience + 1)
    left = max(0, stop_by - (t + 1)) * (sum(seconds[-20:]) / max(1, len(seconds[-20:])))
    if minutes_left is not None:
        left = min(left, max(0.0, minutes_left * 60))
    line += f"; at most about {left / 60:.1f} min left"
    if best is not None and stop_by < total:
        line += f" (stops after round {stop_by} unless validation improves)"
    return line


def watched_loss(metrics: dict[str, float], key: str | None) -> float | None:
    """The round's figure as a loss (lower is better: NDCG negated); None when the round has none."""
    value = math.nan if key is None else metrics.get(key, math.nan)
    if not math.isfinite(value):
        return None
    return -value if key == VALID_NDCG else value


class RunManager:
    """Owns the worker thread that executes runs, one at a time; resumes unfinished runs on start."""

    def __init__(self, *, sessions: sessionmaker[Session], settings: CoordinatorSettings,
                 http: httpx.Client | None = None,
                 on_round: Callable[[str, runs.RoundRecord, RunContract], None] | None = None) -> None:
        self.sessions = sessions
        self.settings = settings
        self.http = http or httpx.Client(limits=httpx.Limits(max_connections=64))
        self.on_round = on_round  # metrics: told of every completed round
        self.stopping = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrec-run")
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="fedrec-fanout")
        self.futures: dict[str, Future[None]] = {}
        self._stalled_since: dict[str, float] = {}  # run -> when it began waiting without progress
        self._release_lock = threading.Lock()  # one activation at a time (a run's publish or an admin's)
        self._kept: dict[str, int] = {}  # run -> the best round every party kept (what a stopped run publishes)

    def releases(self) -> Releases:
        """Staging and activation of releases at the parties (the runner's and the releases API's)."""
        return Releases(sessions=self.sessions, clients=lambda ids: self._clients(ids, TrafficCounter()),
                        pool=self._pool, tolerance=self.settings.release_tolerance, lock=self._release_lock,
                        keep=self.settings.releases_keep, ndcg_tolerance=self.settings.release_ndcg_tolerance)

    def submit(self, run_id: str) -> None:
        """Queue a run for execution."""
        self.futures[run_id] = self._executor.submit(self._execute, run_id)

    def resume_all(self) -> list[str]:
        """Queue every run a previous coordinator process left unfinished."""
        with self.sessions() as session:
            ids = runs.resumable(session=session)
        for run_id in ids:
            self.submit(run_id)
        return ids

    def shutdown(self) -> None:
        """Stop after the current step; runs stay resumable."""
        self.stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True)
        self.http.close()

    # ---- execution ---------------------------------------------------------------------------
    def _clients(self, party_ids: list[str], counter: TrafficCounter) -> dict[str, PartyClient]:
        """Fresh endpoints from the registry (so URL/credential changes apply from the next call)."""
        with self.sessions() as session:
            eps = parties_registry.endpoints(session=session, party_ids=party_ids)
        s = self.settings
        return {p: PartyClient(e, http=self.http, counter=counter, timeout_s=s.request_timeout_s,
                               max_retries=s.max_retries, backoff_s=s.retry_backoff_s)
                for p, e in sorted(eps.items()) if e.enabled}

    def _check(self, run_id: str) -> None:
        if self.stopping.is_set():
            raise Cancelled("coordinator shutting down")
        with self.sessions() as session:
            if runs.get(session=session, run_id=run_id).cancel_requested:
                raise Cancelled("cancelled by admin")

    def _set(self, run_id: str, state: str, detail: str, **fields: Any) -> None:
        with self.sessions() as session:
            runs.set_state(session=session, run_id=run_id, state=state, detail=detail, **fields)

    def _wait(self, run_id: str, state: str, detail: str) -> None:
        """Pause with a clear status, then let the caller retry; past COORD_WAIT_DEADLINE_S the run fails."""
        since = self._stalled_since.setdefault(run_id, time.monotonic())
        if time.monotonic() - since > self.settings.wait_deadline_s:
            raise RunFailed(f"waited {self.settings.wait_deadline_s:g}s for parties without progress: {detail}")
        self._set(run_id, state, detail)
        log.warning("run %s %s: %s", run_id, state, detail)
        if self.stopping.wait(self.settings.pause_poll_s):
            raise Cancelled("coordinator shutting down")
        self._check(run_id)

    def _execute(self, run_id: str) -> None:
        try:
            self._run(run_id)
        except Cancelled as exc:
            if not self.stopping.is_set():
                self._cancelled(run_id, str(exc))
        except DomainError as exc:  # an expected end (too few parties or users, a wait ran out): one line
            log.warning("run %s failed: %s: %s", run_id, exc.code, exc.detail)
            self._set(run_id, runs.FAILED, f"{exc.code}: {exc.detail}")
        except Exception as exc:
            log.exception("run %s crashed", run_id)
            self._set(run_id, runs.FAILED, f"internal error: {type(exc).__name__}: {exc}")

    def _run(self, run_id: str) -> None:
        with self.sessions() as session:
            run = runs.get(session=session, run_id=run_id)
        protocol = registry.protocol_of(run.config)
        config = train_config(run.config, seed=run.seed, rounds=run.rounds_total)
        counter = TrafficCounter()
        self._stalled_since.pop(run_id, None)
        parties = list(run.party_ids)
        if run.n_users is None:
            parties = self._preflight(run_id, parties, protocol, min_parties=run.min_parties)
            n_users, parties = self._align(run_id, parties, counter, min_parties=run.min_parties)
        else:
            n_users = run.n_users
        warm = self._warm_ref(run.warm_start_from)
        engine, parties = self._prepare(run_id, parties, protocol, config, n_users, counter,
                                        min_parties=run.min_parties, warm=warm)
        self._flush(run_id, counter)
        best, why = self._rounds(run_id, protocol, engine)
        self._publish(run_id, parties, counter, best=best, stopped=why)

    def _cancelled(self, run_id: str, why: str) -> None:
        """A cancelled run ends `cancelled`; one with completed rounds first publishes its best round as a
        release (gated like any other), unless it was created or cancelled with publish_on_stop false."""
        with self.sessions() as session:
            run = runs.get(session=session, run_id=run_id)
            history = runs.rounds_of(session=session, run_id=run_id)
        if not run.publish_on_stop or run.rounds_done == 0:
            self._set(run_id, runs.CANCELLED, why)
            return
        kept = self._kept.get(run_id)
        if kept is None:  # a run resumed by a new coordinator process: the parties kept its history's best
            found = self._best(history, ranks=ranks(train_config(run.config, seed=run.seed, rounds=run.rounds_total)))
            kept = None if found is None else found[0]
        try:
            self._publish(run_id, list(run.party_ids), TrafficCounter(), best=kept, stopped=why, state=runs.CANCELLED)
        except DomainError as exc:
            log.warning("run %s: cancelled, and its best round could not be published: %s", run_id, exc.detail)
            self._set(run_id, runs.CANCELLED, f"{why}; its best round was not published: {exc.code}: {exc.detail}")

    def _flush(self, run_id: str, counter: TrafficCounter) -> None:
        sent, received = counter.snapshot()
        with self.sessions() as session:
            runs.add_traffic(session=session, run_id=run_id, sent=sent, received=received)
        counter.sent.clear()
        counter.received.clear()

    def _exclude(self, run_id: str, parties: list[str], reasons: dict[str, str], *, min_parties: int,
                 stage: str) -> list[str]:
        """Leave out the parties with a reason (kept in the run record); fail when fewer than min_parties remain."""
        bad = {p: f"{stage}: {why}" for p, why in reasons.items() if why}
        kept = sorted(p for p in parties if p not in bad)
        if bad:
            with self.sessions() as session:
                run = runs.get(session=session, run_id=run_id)
                excluded = {**(run.excluded or {}), **bad}
                runs.set_state(session=session, run_id=run_id, state=run.state, detail=run.detail,
                               excluded=excluded, party_ids=kept)
            log.warning("run %s leaves out %s", run_id, sorted(bad))
        if len(kept) < min_parties:
            why = "; ".join(f"{p} {r}" for p, r in sorted(bad.items()))
            raise RunFailed(f"{len(kept)} of {len(parties)} parties can take part, min_parties={min_parties}: {why}")
        return kept

    def _failed(self, run_id: str, parties: list[str], failures: dict[str, str], *, min_parties: int,
                stage: str) -> list[str]:
        """After a set-up step failed: parties that fail their pre-flight are left out; if none does, the run
        waits and retries (within COORD_WAIT_DEADLINE_S): a slow or restarting party is not a missing one."""
        refused = {p: why for p, why in failures.items() if why.startswith(REFUSALS)}
        if refused:  # the party answered and will not take part (its policy, the run's settings): not a wait
            return self._exclude(run_id, parties, refused, min_parties=min_parties, stage=stage)
        reasons = self.check(party_ids=sorted(failures))
        if any(reasons.values()):
            return self._exclude(run_id, parties, reasons, min_parties=min_parties, stage=stage)
        self._wait(run_id, runs.PAUSED, f"{stage} waits for parties: {failures}")
        return parties

    def check(self, *, party_ids: list[str], protocol: str = "verfedgnn") -> dict[str, str]:
        """Pre-flight of the given parties: party → '' when it passed, else why not."""
        with self.sessions() as session:
            eps = parties_registry.endpoints(session=session, party_ids=party_ids)
        return check_parties(endpoints=eps, party_ids=party_ids, http=self.http, protocol=protocol,
                             timeout_s=self.settings.preflight_timeout_s, pool=self._pool)

    def _preflight(self, run_id: str, parties: list[str], protocol: str, *, min_parties: int) -> list[str]:
        """Before PSI: the parties that are registered, enabled, reachable, authorised, compatible and hold data."""
        self._check(run_id)
        self._set(run_id, runs.ALIGNING, "pre-flight: checking the parties")
        return self._exclude(run_id, parties, self.check(party_ids=parties, protocol=protocol),
                             min_parties=min_parties, stage="pre-flight")

    def _align(self, run_id: str, parties: list[str], counter: TrafficCounter, *,
               min_parties: int) -> tuple[int, list[str]]:
        """PSI over the parties; a party that fails it is checked and left out; too few common users fail the run."""
        while True:
            self._check(run_id)
            clients = self._clients(parties, counter)
            self._set(run_id, runs.ALIGNING, "aligning users by private set intersection")
            try:
                n_users = align_users(clients=clients, run_id=run_id, pool=self._pool)
            except DomainError as exc:
                parties = self._failed(run_id, parties, {p: f"{exc.code}: {exc.detail}" for p in parties},
                                       min_parties=min_parties, stage="alignment")
                continue
            if n_users < self.settings.min_common_users:
                raise RunFailed(f"{' and '.join(parties)} have {n_users} users in common "
                                f"(minimum COORD_MIN_COMMON_USERS={self.settings.min_common_users})")
            self._set(run_id, runs.ALIGNING, f"{n_users} common users", n_users=n_users)
            return n_users, parties

    def _warm_ref(self, release_id: str | None) -> WarmStartRef | None:
        """The release a warm run starts from and its run (None: a cold run)."""
        if release_id is None:
            return None
        with self.sessions() as session:
            row = releases_store.get(session=session, release_id=release_id)
            return WarmStartRef(release_id=release_id, run_id=row.run_id, round_index=row.round_index)

    def _prepare(self, run_id: str, party_ids: list[str], protocol: str, config: Any, n_users: int,
                 counter: TrafficCounter, *, min_parties: int,
                 warm: WarmStartRef | None = None) -> tuple[Engine, list[str]]:
        """Configure + start every party, build the protocol's engine, restore the newest checkpoint
        (a warm run with none yet: the release's run's last checkpoint, users mapped by the parties' row map)."""
        settings = {"protocol": protocol, **config.model_dump(exclude={"seed", "rounds", "projection_seed"})}
        request = ConfigureRequest(run_id=run_id, config=settings, seed=registry.plan(protocol).seed(config),
                                   warm_start=warm)
        while True:
            self._check(run_id)
            clients = self._clients(party_ids, counter)
            answers, failures = fan_out(self._pool, clients, lambda c: c.configure(request=request))
            failures.update({p: "not registered or disabled" for p in set(party_ids) - set(clients)})
            if failures:
                party_ids = self._failed(run_id, party_ids, failures, min_parties=min_parties, stage="configure")
                continue
            counts = {p: a.n_items for p, a in answers.items()}
            n = sum(a.train_count for a in answers.values())
            mean = sum(a.train_sum for a in answers.values()) / max(1, n)
            # Key agreement: relay the signed keys; each party seals its seed contribution for each peer.
            # A federation of one has no peer: no key agreement (and no masking: `secure_run`).
            peers = PeersRequest(announcements=[answers[p].key for p in sorted(answers)])
            sealed, failures = ({}, {}) if len(clients) == 1 else fan_out(
                self._pool, clients, lambda c: c.peers(run_id=run_id, request=peers))
            if failures:
                party_ids = self._failed(run_id, party_ids, failures, min_parties=min_parties, stage="key agreement")
                continue
            starts = {p: StartRequest(total_items=max(1, sum(counts.values())), item_counts=counts, global_mean=mean,
                                      sealed=self._sealed_for(p, sealed)) for p in clients}

            def start_party(c: PartyClient) -> StartResponse:
                return c.start(run_id=run_id, request=starts[c.party_id])

            _, failures = fan_out(self._pool, clients, start_party)
            if failures:
                party_ids = self._failed(run_id, party_ids, failures, min_parties=min_parties, stage="start")
                continue
            break
        engine = registry.plan(protocol).engine(config=config, n_users=n_users, item_counts=counts, global_mean=mean)
        with self.sessions() as session:
            ckpt = runs.latest_checkpoint(session=session, run_id=run_id)
        if ckpt is not None:
            engine.restore(ckpt[1])
        elif warm is not None:
            self._warm_engine(protocol, engine, warm, answers)
        return engine, party_ids

    def _warm_engine(self, protocol: str, engine: Engine, warm: WarmStartRef,
                     answers: dict[str, ConfigureResponse]) -> None:
        """Load the release's run's public parameters, re-indexed by the row map every party sent (all equal)."""
        maps = {p: tuple(a.user_rows) for p, a in answers.items() if a.user_rows is not None}
        if not maps:
            raise RunFailed(f"warm start from {warm.release_id}: no party of this run holds that release's alignment")
        if len(set(maps.values())) != 1:
            raise RunFailed(f"warm start from {warm.release_id}: the parties sent different user row maps "
                            f"({', '.join(sorted(maps))})")
        with self.sessions() as session:
            old = runs.checkpoint_of(session=session, run_id=warm.run_id, round_index=warm.round_index)
        if old is None:
            raise RunFailed(f"warm start from {warm.release_id}: its run {warm.run_id} kept no checkpoint of "
                            f"round {warm.round_index}")
        rows = np.asarray(next(iter(maps.values())), dtype=np.int64)
        try:
            registry.plan(protocol).warm_engine(engine, state=old, user_rows=rows)
        except ValueError as exc:
            raise RunFailed(f"warm start from {warm.release_id}: {exc}") from exc
        log.info("run warm-started", extra={"release_id": warm.release_id, "kept_users": int((rows >= 0).sum()),
                                            "new_users": int((rows < 0).sum())})

    @staticmethod
    def _sealed_for(party_id: str, sealed: dict[str, PeersResponse]) -> dict[str, str]:
        """The boxes addressed to `party_id`, by sender (the coordinator cannot open them)."""
        return {sender: answer.sealed[party_id] for sender, answer in sorted(sealed.items())
                if sender != party_id and party_id in answer.sealed}

    def _rounds(self, run_id: str, protocol: str, engine: Engine) -> tuple[int | None, str | None]:
        """Rounds from the last completed one; below min_parties the run pauses and retries the round.

        Returns the best validation round whose model every party kept (None: no validation figures), and why
        the rounds ended before the cap (None: they reached it).
        """
        attempt = 0
        bound: list[str] | None = None  # the set a failed attempt's first summed step went to (retry over it)
        serves_lists = ranks(engine.config)
        with self.sessions() as session:  # a resumed run: the parties kept its best round so far
            done = runs.rounds_of(session=session, run_id=run_id)
        best, watched = self._best(done, ranks=serves_lists), watched_figure([r.metrics for r in done],
                                                                               ranks=serves_lists)
        if best is not None:
            self._kept[run_id] = best[0]
        seconds = [r.seconds for r in done]
        with self.sessions() as session:
            members = list(runs.get(session=session, run_id=run_id).party_ids)
        strategy = aggregation(secure=secure_run(registry.plan(protocol).secure_by_default(engine.config), members))
        rule = registry.plan(protocol).stopping(engine.config)  # the plan declares it (None: never early)
        patience = rule.patience or 1 << 30
        rank_patience = rule.rank_patience or patience  # the ranking figure stalls longer than the RMSE
        while True:
            with self.sessions() as session:
                run = runs.get(session=session, run_id=run_id)
                # Early stopping needs the history (O(rounds) rows each round); it cannot trigger
                # when patience reaches the run's length, so skip the read then.
                stoppable = min(patience, rank_patience) < run.rounds_total
                history = runs.rounds_of(session=session, run_id=run_id) if stoppable else []
            t = run.rounds_done
            kept = None if best is None else best[0]
            if t >= run.rounds_total:
                return kept, None
            if stoppable and self._stalled(history, patience, rank_patience, ranks=serves_lists):
                return kept, STALLED
            if run.max_minutes is not None and t > 0 and elapsed_minutes(run.created_at) >= run.max_minutes:
                return kept, TIMED_OUT
            self._check(run_id)
            counter = TrafficCounter()
            clients = self._clients(run.party_ids, counter)
            started = time.monotonic()
            if len(clients) < run.min_parties:
                self._wait(run_id, runs.PAUSED, f"round {t}: only {sorted(clients)} enabled, "
                           f"min_parties={run.min_parties}")
                continue
            links = {p: HttpLink(c, run_id=run_id) for p, c in retry_clients(clients, bound).items()}
            # One request id per round attempt: every party logs it, so a round can be followed across services.
            with bound_request_id(f"{run_id}.r{t}.a{attempt}") as request_id:
                log.info("round started", extra={"run_id": run_id, "round": t, "attempt": attempt})
                outcome = engine.play(links=links, pool=self._pool, round_index=t, attempt=attempt,
                                      min_parties=run.min_parties, aggregation=strategy)
            sent, received = counter.snapshot()
            if outcome.metrics is None:
                attempt += 1
                if outcome.masked_with and strategy.name == "masked":
                    bound = list(outcome.masked_with)
                with self.sessions() as session:
                    runs.add_traffic(session=session, run_id=run_id, sent=sent, received=received)
                self._wait(run_id, runs.PAUSED, f"round {t}: {len(outcome.participants)} parties answered, "
                           f"min_parties={run.min_parties}; failures: {outcome.failures}")
                continue
            row = metrics_row(outcome.metrics)
            record = runs.RoundRecord(t, outcome.participants, outcome.failures, row, sent, received,
                                      time.monotonic() - started)
            with self.sessions() as session:
                runs.record_round(session=session, run_id=run_id, record=record,
                                  checkpoint=engine.checkpoint(), keep_round=None if best is None else best[0])
            log.info("round completed", extra={"run_id": run_id, "round": t, "request_id": request_id,
                                               "seconds": round(record.seconds, 3), "participants": outcome.participants})
            now = watched_figure([row], ranks=serves_lists)
            first = VALID_NDCG if serves_lists else VALID_RMSE
            if now is not None and now != watched and watched != first:
                watched, best = now, None  # a first figure, or the first of the served one's: it decides from here
            loss = watched_loss(row, watched)
            if loss is not None and (best is None or loss < best[1]):
                best = self._keep_best(run_id, clients, t, loss) or best
                if best is not None:
                    self._kept[run_id] = best[0]
            seconds.append(record.seconds)
            left = None if run.max_minutes is None else run.max_minutes - elapsed_minutes(run.created_at)
            with self.sessions() as session:
                if best is not None and best[0] == t:
                    best_metrics = row
                else:
                    best_metrics = {} if best is None else next(
                        (dict(r.metrics) for r in runs.rounds_of(session=session, run_id=run_id)
                         if r.round_index == best[0]), {})
                runs.set_state(session=session, run_id=run_id, state=runs.RUNNING, detail=progress(
                    t=t, total=run.rounds_total, best_metrics=best_metrics, best=best, watched=watched,
                    patience=rank_patience if watched == VALID_NDCG else patience, seconds=seconds, minutes_left=left))
            if self.on_round is not None:
                self.on_round(run_id, record, RunContract(registry.plan(protocol), engine.config))
            attempt, bound = 0, None
            self._stalled_since.pop(run_id, None)

    @staticmethod
    def _losses(history: list[Any], *, ranks: bool = False) -> list[tuple[float, int]]:
        """(loss, round) of every round with the watched validation figure (`watched_figure`)."""
        key = watched_figure([r.metrics for r in history], ranks=ranks)
        out = [(watched_loss(r.metrics, key), r.round_index) for r in history]
        return [(loss, t) for loss, t in out if loss is not None]

    @classmethod
    def _best(cls, history: list[Any], *, ranks: bool = False) -> tuple[int, float] | None:
        """(round, loss) of the best validation round of a run's history (None: no figures)."""
        valid = cls._losses(history, ranks=ranks)
        return None if not valid else (min(valid)[1], min(valid)[0])

    def _keep_best(self, run_id: str, clients: dict[str, PartyClient], round_index: int,
                   loss: float) -> tuple[int, float] | None:
        """Ask every party to keep this round's model (the best so far); None when one could not (the release
        then holds the previous best, which every party kept)."""
        _, failures = fan_out(self._pool, clients, lambda c: c.keep_best(run_id=run_id, round_index=round_index))
        if failures:
            log.warning("run %s: round %d not kept at %s", run_id, round_index, sorted(failures))
            return None
        return round_index, loss

    @classmethod
    def _stalled(cls, history: list[Any], patience: int, rank_patience: int | None = None, *,
                 ranks: bool = False) -> bool:
        """Early stopping: `patience` rounds without a better validation RMSE (as the harness does), or, when no
        party reports rating errors (every party implicit), `rank_patience` (default `patience`) rounds without a
        better validation NDCG@10.

        Rounds with neither figure (no validation labels, DP's withheld sums) never stop a run.
        """
        valid = cls._losses(history, ranks=ranks)
        if watched_figure([r.metrics for r in history], ranks=ranks) == VALID_NDCG and rank_patience is not None:
            patience = rank_patience
        return bool(valid) and valid[-1][1] - min(valid)[1] >= patience

    def _publish(self, run_id: str, party_ids: list[str], counter: TrafficCounter, *, best: int | None,
                 stopped: str | None = None, state: str = runs.COMPLETED) -> None:
        """Stage the run's serving model (its best validation round's, else its last round's) at every party as a
        release, activate it if the gate lets it. The run's headline figures are that round's: what is served."""
        with self.sessions() as session:
            run = runs.get(session=session, run_id=run_id)
            history = runs.rounds_of(session=session, run_id=run_id)
        chosen = run.rounds_done - 1 if best is None else best
        metrics = next((dict(r.metrics) for r in history if r.round_index == chosen), {})
        release = self.releases().publish(run_id=run_id, party_ids=party_ids, round_index=chosen, metrics=metrics,
                                          warm_start_from=run.warm_start_from)
        dp = (run.config.get("train") or run.config).get("dp_epsilon") is not None
        done = f"{run.rounds_done} rounds" if state == runs.COMPLETED else f"{stopped} after {run.rounds_done} rounds"
        detail = f"{'completed ' if state == runs.COMPLETED else ''}{done}"
        if state == runs.COMPLETED and stopped is not None:
            detail += f" ({stopped})"
        detail += f"; {release.release_id} {release.state}"
        if release.state != ACTIVE:
            detail += f" ({release.reason})"
        detail += f"; served round {chosen}: " + served_figures(metrics, dp=dp)
        self._set(run_id, state, detail)


def served_figures(metrics: dict[str, float], *, dp: bool) -> str:
    """The served round's pooled figures, named as such (validation, then test where labelled)."""
    parts = [f"pooled {name} {metrics[k]:.4f}" for k, name in
             ((VALID_NDCG, "validation NDCG@10"), (VALID_RMSE, "validation RMSE"), ("test_rmse", "test RMSE"))
             if k in metrics and math.isfinite(metrics[k])]
    if "test_rmse" not in metrics:
        parts.append("held-out errors are not reported under whole-run differential privacy" if dp
                     else "no test ratings labelled at the parties (fedrec party evaluation-split FILE)")
    return ", ".join(parts)
