"""Which stored model a party serves: never a staged one; the active release's once activated."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from services.errors import NotFound
from services.party import serving


def _model(run_id: str) -> serving.ServingModel:
    f32 = np.float32
    return serving.ServingModel(run_id=run_id, round_index=0, user_ids=np.array(["u"]), item_ids=np.array(["i"]),
                                h_u=np.ones((1, 2), f32), h_v=np.ones((1, 2), f32), user_bias=np.zeros(1, f32),
                                item_bias=np.zeros(1, f32), global_bias=3.0, rating_min=1.0, rating_max=5.0)


def test_staged_models_are_served_only_once_activated(sessions: sessionmaker[Session]) -> None:
    with sessions() as s:
        assert serving.served(session=s) is None
        staged = serving.publish(session=s, model=_model("r1"), release_id="release-1")
        assert serving.served(session=s) is None  # staged, not active: nothing to serve yet
        token = serving.generation(session=s)
        assert serving.activate(session=s, release_id="release-1") == staged
        assert serving.served(session=s) == (staged, "release-1") and serving.generation(session=s) != token
        second = serving.publish(session=s, model=_model("r2"), release_id="release-2")
        assert serving.served(session=s) == (staged, "release-1")  # the newer model waits for its activation
        serving.activate(session=s, release_id="release-2")
        assert serving.served(session=s) == (second, "release-2")
        serving.activate(session=s, release_id="release-1")  # rollback: the earlier model again
        assert serving.served(session=s) == (staged, "release-1")
        with pytest.raises(NotFound, match="release-9"):
            serving.activate(session=s, release_id="release-9")
        plain = serving.publish(session=s, model=_model("r3"))  # without a release: served at once
        assert serving.served(session=s) == (plain, None)
