"""RecordingLink: logs every message of a round and changes nothing."""

from __future__ import annotations

import numpy as np

from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.recording import record
from services.verfedgnn.rounds import InProcessFederation
from tests.unit.attacks.tiny import TINY, tiny_federation


def _federation() -> InProcessFederation:
    fed = tiny_federation()
    coord = CoordinatorTrainer(config=TINY, n_users=fed.n_users, global_mean=fed.global_mean,
                               item_counts={p.party_id: p.n_items for p in fed.parties})
    return InProcessFederation(coordinator=coord, parties={p.party_id: PartyTrainer(config=TINY, data=p, seed=TINY.seed)
                                                           for p in fed.parties})


def test_recorded_run_is_the_same_run() -> None:
    """Same losses and parameters with and without recording links."""
    plain, recorded = _federation(), _federation()
    log = record(recorded)
    for t in range(3):
        assert plain.run_round(t).loss == recorded.run_round(t).loss
    for name, value in plain.coordinator.public_params().items():
        np.testing.assert_array_equal(value, recorded.coordinator.public_params()[name])
    assert len(log.records) == 3 * 2 * 2 * (2 + 2 * TINY.layers)  # rounds × parties × (down, up) × steps


def test_log_holds_what_crossed_each_link() -> None:
    """Projections up, relayed sums down (the other party's projection with 2 parties), uploads up."""
    fed = _federation()
    log = record(fed, keep=lambda r: r.step.round_index == 0)
    fed.run_round(0)
    fed.run_round(1)
    assert {r.step.round_index for r in log.records} == {0}
    for layer in range(TINY.layers):
        y0 = log.projection(party_id="party0", round_index=0, layer=layer)
        y1 = log.projection(party_id="party1", round_index=0, layer=layer)
        assert y0.shape == (round(TINY.q_ratio * fed.coordinator.n_users), TINY.dim)
        np.testing.assert_allclose(log.others(party_id="party0", round_index=0, layer=layer), y1, rtol=1e-6)
        np.testing.assert_allclose(log.others(party_id="party1", round_index=0, layer=layer), y0, rtol=1e-6)
    up = log.upload(party_id="party1", round_index=0)
    assert up.quantized and not up.dense and up.round_index == 0
    begin = log.public(party_id="party0", round_index=0)
    assert isinstance(begin, dict) and set(begin) == set(fed.coordinator.public_params())
