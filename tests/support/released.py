"""Read what a party process serves straight from its SQLite database (tests compare it with in-process runs)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from services.db.party_tables import ModelArtifact
from services.party.serving import ARTIFACT_NAME, ServingModel, served


def served_model(session: Session) -> ServingModel:
    """The serving model the party answers from (its active release's, else its newest)."""
    found = served(session=session)
    assert found is not None, "the party serves no model"
    payload = session.scalar(select(ModelArtifact.payload).where(ModelArtifact.name == ARTIFACT_NAME,
                                                                 ModelArtifact.version == found[0]))
    assert payload is not None, "the served model's artifact is gone"
    return ServingModel.from_bytes(payload)


def released_model(db: Path) -> ServingModel:
    """`served_model` of the party whose SQLite database is `db`."""
    engine = create_engine(f"sqlite:///{db}")
    try:
        with Session(engine) as session:
            return served_model(session)
    finally:
        engine.dispose()
