"""Coordinator storage on SQLite and PostgreSQL: migrations, registry, runs, rounds and checkpoints."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from services.coordinator import registry, runs
from services.db.session import make_engine, make_sessionmaker, upgrade
from services.errors import Conflict, NotFound, ValidationFailed


def test_registry_runs_rounds_and_checkpoints(database_url: str) -> None:
    upgrade(database_url, environment="coordinator")
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)
    try:
        with sessions() as s:
            _exercise(s)
    finally:
        engine.dispose()


def _exercise(s: Session) -> None:
    registry.register(session=s, party_id="a", url="http://a:1", token="ta")
    registry.register(session=s, party_id="b", url="http://b:1", token="tb")
    with pytest.raises(Conflict):
        registry.register(session=s, party_id="a", url="http://a:2", token="x")
    assert registry.update(session=s, party_id="b", enabled=False).enabled is False
    with pytest.raises(ValidationFailed):
        runs.create(session=s, rounds=3, min_parties=2, seed=0, config={})  # only "a" is enabled
    registry.update(session=s, party_id="b", enabled=True)
    run = runs.create(session=s, rounds=3, min_parties=2, seed=7, config={"dim": 4})
    assert run.party_ids == ["a", "b"] and runs.resumable(session=s) == [run.run_id]
    with pytest.raises(Conflict):
        runs.create(session=s, rounds=3, min_parties=2, seed=0, config={})
    assert runs.latest_checkpoint(session=s, run_id=run.run_id) is None
    for t in range(3):
        record = runs.RoundRecord(t, ["a", "b"], {}, {"test_rmse": 1.0 - t / 10}, {"a": 10, "b": 20}, {"a": 5})
        runs.record_round(session=s, run_id=run.run_id, record=record, checkpoint=bytes([t]) * 8)
    assert runs.latest_checkpoint(session=s, run_id=run.run_id) == (2, bytes([2]) * 8)
    got = runs.get(session=s, run_id=run.run_id)
    assert got.rounds_done == 3 and got.bytes_sent == {"a": 30, "b": 60} and got.bytes_received == {"a": 15}
    assert [r.round_index for r in runs.rounds_of(session=s, run_id=run.run_id)] == [0, 1, 2]
    runs.set_state(session=s, run_id=run.run_id, state=runs.COMPLETED, detail="done")
    with pytest.raises(Conflict):
        runs.cancel(session=s, run_id=run.run_id)
    with pytest.raises(NotFound):
        runs.get(session=s, run_id="nope")
    assert runs.resumable(session=s) == []
