"""Release state machine and promotion gate on SQLite and PostgreSQL, with fake parties that record calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from services.coordinator import registry, releases, runs
from services.coordinator.releases import Releases, gate
from services.db.session import make_engine, make_sessionmaker, upgrade
from services.errors import Conflict, NotFound, PartyUnavailable


class FakeParty:
    """Stages and activates in memory; `down` makes it refuse like an unreachable party."""

    def __init__(self, party_id: str) -> None:
        self.party_id, self.staged, self.serving, self.down = party_id, set[str](), None, False

    def stage(self, *, run_id: str, round_index: int, release_id: str) -> int:
        if self.down:
            raise PartyUnavailable(f"party {self.party_id} unavailable")
        self.staged.add(release_id)
        return len(self.staged)

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
                                          lock=threading.Lock(), keep=getattr(request, "param", 5))
    finally:
        pool.shutdown()
        engine.dispose()


def _publish(sessions: sessionmaker[Session], rel: Releases, valid: float | None) -> releases.ReleaseRow:
    with sessions() as s:
        run = runs.create(session=s, rounds=1, min_parties=2, seed=0, config={})
        runs.set_state(session=s, run_id=run.run_id, state=runs.COMPLETED, detail="")
        run_id = run.run_id
    metrics = {} if valid is None else {"valid_rmse": valid, "test_rmse": 1.0}
    return rel.publish(run_id=run_id, party_ids=["a", "b"], round_index=0, metrics=metrics)


def test_gate() -> None:
    assert gate(candidate=1.0, active=None, tolerance=0.0) is None
    assert gate(candidate=0.954, active=0.95, tolerance=0.005) is None
    held = gate(candidate=0.96, active=0.95, tolerance=0.005)
    assert held is not None and "0.9600" in held and "0.9500" in held and "0.005" in held
    assert gate(candidate=None, active=0.95, tolerance=1.0) is not None


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
    assert rel.read("release-1").state == "pruned" and rel.read("release-5").state == "staged"
    assert parties["a"].staged == {"release-4", "release-5"} and parties["b"].staged == {"release-4"}
