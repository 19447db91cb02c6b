"""Release state machine and promotion gate on SQLite and PostgreSQL, with fake parties that record calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from services.coordinator import registry, releases, runs
from services.coordinator.releases import VALID_NDCG, VALID_RMSE, Releases, figures, gate
from services.db.session import make_engine, make_sessionmaker, upgrade
from services.errors import Conflict, NotFound, PartyUnavailable


class FakeParty:
    """Stages and activates in memory; `down` makes it refuse like an unreachable party."""

    def __init__(self, party_id: str) -> None:
        self.party_id, self.staged, self.serving, self.down = party_id, set[str](), None, False

    def stage(self, *, run_id: str, round_index: int, release_id: str) -> dict[str, Any]:
        if self.down:
            raise PartyUnavailable(f"party {self.party_id} unavailable")
        self.staged.add(release_id)
        value = [{"slice": "all", "users": 40, "local_ndcg10": 0.2, "federated_ndcg10": 0.25, "served_ndcg10": 0.3}]
        return {"version": len(self.staged), "value": value if self.party_id == "a" else []}

    def activate_release(self, *, release_id: str) -> int:
        if self.down or release_id not in self.staged:
            raise PartyUnavailable(f"party {self.party_id} unavailable")
        self.serving = release_id
        return 1

    def prune_releases(self, *, keep: list[str]) -> list[str]:
        if self.down:
            raise PartyUnavailable(f"party {self.party_id} unavailable")
        gone = sorted(self.staged - set(keep) - {self.serving})
        self.staged -= set(gone)
        return gone


@pytest.fixture
def world(database_url: str, request: pytest.FixtureRequest) -> Iterator[
        tuple[sessionmaker[Session], dict[str, FakeParty], Releases]]:
    upgrade(database_url, environment="coordinator")
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)
    parties = {p: FakeParty(p) for p in ("a", "b")}
    with sessions() as s:
        for p in parties:
            registry.register(session=s, party_id=p, url=f"http://{p}:1", token="t")
    pool = ThreadPoolExecutor(4)
    clients: Any = lambda ids: {p: parties[p] for p in ids}
    try:
        yield sessions, parties, Releases(sessions=sessions, clients=clients, pool=pool, tolerance=0.005,
                                          lock=threading.Lock(), keep=getattr(request, "param", 5),
                                          ndcg_tolerance=0.01)
    finally:
        pool.shutdown()
        engine.dispose()


def _publish(sessions: sessionmaker[Session], rel: Releases, valid: float | None,
             ndcg: float | None = None) -> releases.ReleaseRow:
    with sessions() as s:
        run = runs.create(session=s, rounds=1, min_parties=2, seed=0, config={})
        runs.set_state(session=s, run_id=run.run_id, state=runs.COMPLETED, detail="")
        run_id = run.run_id
    metrics = {} if valid is None else {"valid_rmse": valid, "test_rmse": 1.0}
    if ndcg is not None:
        metrics[VALID_NDCG] = ndcg
    return rel.publish(run_id=run_id, party_ids=["a", "b"], round_index=0, metrics=metrics)


def _gate(candidate: dict[str, float], active: dict[str, float] | None) -> str | None:
    return gate(candidate=candidate, active=active, rmse_tolerance=0.005, ndcg_tolerance=0.01)


def test_gate_rmse() -> None:
    assert _gate({VALID_RMSE: 1.0}, None) is None
    assert _gate({VALID_RMSE: 0.954}, {VALID_RMSE: 0.95}) is None
    held = _gate({VALID_RMSE: 0.96}, {VALID_RMSE: 0.95})
    assert held is not None and "0.9600" in held and "0.9500" in held and "0.005" in held
    assert _gate({}, {VALID_RMSE: 0.95}) is not None


def test_gate_compares_both_figures_and_names_the_one_that_failed() -> None:
    active = {VALID_RMSE: 0.95, VALID_NDCG: 0.20}
    assert _gate({VALID_RMSE: 0.954, VALID_NDCG: 0.191}, active) is None  # both within their tolerance
    assert _gate({VALID_RMSE: 0.90, VALID_NDCG: 0.30}, active) is None
    ndcg = _gate({VALID_RMSE: 0.94, VALID_NDCG: 0.18}, active)  # better RMSE, worse ranking
    assert ndcg is not None and ndcg.startswith("validation NDCG@10 0.1800 is below the active release's 0.2000")
    assert "tolerance 0.01" in ndcg and "validation RMSE 0.9400 vs 0.9500: within 0.005" in ndcg
    rmse = _gate({VALID_RMSE: 0.97, VALID_NDCG: 0.25}, active)  # better ranking, worse RMSE
    assert rmse is not None and rmse.startswith("validation RMSE 0.9700 is worse than the active release's 0.9500")
    assert "validation NDCG@10 0.2500 vs 0.2000: within 0.01" in rmse and "below" not in rmse
    both = _gate({VALID_RMSE: 0.97, VALID_NDCG: 0.10}, active)
    assert both is not None and "RMSE 0.9700 is worse" in both and "NDCG@10 0.1000 is below" in both
    missing = _gate({VALID_RMSE: 0.94}, active)  # a candidate without the ranking figure is held
    assert missing is not None and "no validation NDCG@10 to compare with the active release's 0.2000" in missing
    # an active release from before NDCG was reported: RMSE alone decides
    assert _gate({VALID_RMSE: 0.95, VALID_NDCG: 0.01}, {VALID_RMSE: 0.95}) is None


def test_gate_of_an_all_implicit_federation_is_ndcg_alone() -> None:
    active = {VALID_NDCG: 0.20}
    assert _gate({VALID_NDCG: 0.195}, active) is None
    held = _gate({VALID_NDCG: 0.15}, active)
    assert held is not None and "0.1500" in held and "0.2000" in held and "RMSE" not in held
    assert figures({VALID_NDCG: 0.2, "valid_rmse": float("nan"), "loss": 3.0}) == {VALID_NDCG: 0.2}


def test_a_release_worse_on_ndcg_stays_staged_with_both_figures(
        world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, parties, rel = world
    first = _publish(sessions, rel, 0.95, ndcg=0.30)
    assert first.state == "active" and first.valid_ndcg == 0.30
    held = _publish(sessions, rel, 0.94, ndcg=0.25)
    assert held.state == "staged" and held.reason.startswith("held by the promotion gate: validation NDCG@10 0.2500")
    assert all(f in held.reason for f in ("0.2500", "0.3000", "0.9400", "0.9500"))
    assert {p.serving for p in parties.values()} == {"release-1"}
    implicit = _publish(sessions, rel, None, ndcg=0.299)  # no RMSE, the active one has: held for that
    assert implicit.state == "staged" and "no validation RMSE" in implicit.reason
    assert _publish(sessions, rel, 0.949, ndcg=0.295).state == "active"


def test_life_of_releases(world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, parties, rel = world
    first = _publish(sessions, rel, 0.95)
    assert (first.release_id, first.state) == ("release-1", "active")
    assert {p.serving for p in parties.values()} == {"release-1"}
    worse = _publish(sessions, rel, 1.10)
    assert worse.state == "staged" and "1.1000" in worse.reason and "0.9500" in worse.reason
    with pytest.raises(Conflict, match="promotion gate"):
        rel.activate(release_id="release-2")
    assert rel.activate(release_id="release-2", force=True).state == "active"
    assert rel.read("release-1").state == "retired"
    back = rel.activate(release_id="release-1")  # rollback: no force
    assert back.state == "active" and "rollback" in back.reason and rel.read("release-2").state == "retired"
    assert {p.serving for p in parties.values()} == {"release-1"}
    with pytest.raises(NotFound):
        rel.activate(release_id="release-9")


def test_a_party_missing_staging_or_activation_keeps_the_previous_release(
        world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, parties, rel = world
    _publish(sessions, rel, 0.95)
    parties["b"].down = True
    missed = _publish(sessions, rel, 0.90)
    assert missed.state == "staged" and missed.staged == ["a"] and "not staged at b" in missed.reason
    assert {p.serving for p in parties.values()} == {"release-1"}
    with pytest.raises(Conflict, match="not staged at b"):
        rel.activate(release_id=missed.release_id, force=True)
    # Staged everywhere, but b is down when activating: a goes back to release 1 and nothing changes.
    parties["b"].down = False
    staged = _publish(sessions, rel, 0.90)
    assert staged.state == "active"
    parties["a"].down = True
    with pytest.raises(PartyUnavailable):
        rel.activate(release_id="release-1")
    assert rel.read("release-3").state == "active" and "activation failed at a" in rel.read("release-1").reason
    with sessions() as s:
        assert releases.active(session=s) is not None
        assert [r.release_id for r in releases.list_releases(session=s)] == ["release-3", "release-2", "release-1"]


@pytest.mark.parametrize("world", [2], indirect=True)
def test_retention_keeps_the_newest_and_the_active(
        world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, parties, rel = world
    _publish(sessions, rel, 0.90)  # release-1, active
    for valid in (1.2, 1.3, 1.4):  # held by the gate: release-1 stays active
        assert _publish(sessions, rel, valid).state == "staged"
    with sessions() as s:
        states = {r.release_id: r.state for r in releases.list_releases(session=s)}
    assert states == {"release-4": "staged", "release-3": "staged", "release-2": "pruned", "release-1": "active"}
    assert "COORD_RELEASES_KEEP" in rel.read("release-2").reason
    assert {frozenset(p.staged) for p in parties.values()} == {frozenset({"release-1", "release-3", "release-4"})}
    with pytest.raises(Conflict, match="pruned"):
        rel.activate(release_id="release-2", force=True)
    # A party down at a prune catches up at the next one (it is told what to keep, not what to delete).
    parties["b"].down = True
    assert _publish(sessions, rel, 1.5).staged == ["a"]  # release-5; release-3 pruned, at a only
    assert rel.read("release-3").state == "pruned" and "release-3" in parties["b"].staged
    parties["b"].down = False
    assert rel.activate(release_id="release-4", force=True).state == "active"
    # release-1, served before it (the newest that passed the gate), stays: the way back (issue 34)
    assert rel.read("release-1").state == "retired" and rel.read("release-5").state == "staged"
    assert parties["a"].staged == {"release-1", "release-4", "release-5"}
    assert parties["b"].staged == {"release-1", "release-4"}
    assert rel.activate(release_id="release-1").state == "active"  # a rollback, no gate
    for valid in (1.6, 1.7):  # release-6 and -7, held: release-5 goes; release-4 (served before) stays
        _publish(sessions, rel, valid)
    assert rel.read("release-4").state == "retired" and rel.read("release-5").state == "pruned"


def test_releases_of_an_all_implicit_federation_are_gated_on_ndcg(
        world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, _, rel = world
    assert _publish(sessions, rel, None, ndcg=0.20).state == "active"
    worse = _publish(sessions, rel, None, ndcg=0.15)
    assert worse.state == "staged" and "validation NDCG@10 0.1500 is below" in worse.reason, worse.reason
    assert worse.valid_rmse is None and worse.valid_ndcg == 0.15
    assert _publish(sessions, rel, None, ndcg=0.195).state == "active"


def test_the_value_report_of_each_party_is_kept_on_the_release(
        world: tuple[sessionmaker[Session], dict[str, FakeParty], Releases]) -> None:
    sessions, _, rel = world
    row = _publish(sessions, rel, 0.9)
    assert row.value_report == {"a": [{"slice": "all", "users": 40, "local_ndcg10": 0.2, "federated_ndcg10": 0.25,
                                       "served_ndcg10": 0.3}]}  # b reported none: left out
