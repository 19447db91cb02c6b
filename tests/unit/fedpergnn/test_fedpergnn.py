"""FedPerGNN baseline: its protections are applied on the wire (audited on recorded messages), and it trains."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from services.evaluation.baselines import fedpergnn_federation
from services.evaluation.harness import Federation
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.messages import ExpansionDownload, ExpansionUpload, LdpUpload
from services.fedpergnn.rounds import ExchangeLog
from tests.unit.attacks.tiny import N_USERS, TINY, tiny_federation

SILENT = 12  # aligned users with no rating anywhere: their gradient rows are zero at every party


def _with_silent_users(fed: Federation) -> Federation:
    n = fed.n_users + SILENT
    return Federation([replace(p, n_users=n) for p in fed.parties], n, fed.global_mean)


def _recorded(*, use_ldp: bool, rounds: int = 1, n_pseudo: int = 5) -> tuple[ExchangeLog, Federation]:
    fed = _with_silent_users(tiny_federation())
    config = FedPerGNNConfig(train=TINY, use_ldp=use_ldp, n_pseudo=n_pseudo)
    run = fedpergnn_federation(fed.parties, config=config, global_mean=fed.global_mean)
    log = run.record()
    for t in range(rounds):
        run.run_round(t)
    return log, fed


def _upload(log: ExchangeLog, party: str, round_index: int = 0) -> LdpUpload:
    up = log.find(party_id=party, step="finish", round_index=round_index)
    assert isinstance(up, LdpUpload)
    return up


def test_ldp_is_on_every_uploaded_element() -> None:
    """Uploaded = clip(raw · grad_scale, δ) + Laplace(λ): residuals against the same round without LDP."""
    on_log, _ = _recorded(use_ldp=True)
    off_log, _ = _recorded(use_ldp=False)
    residuals, raw_values = [], []
    for party in ("party0", "party1"):
        on, off = _upload(on_log, party), _upload(off_log, party)
        where = np.searchsorted(on.rows, off.rows)
        assert np.array_equal(on.rows[where], off.rows)  # every real row is uploaded
        for name, raw in off.per_user.items():
            sent = on.per_user[name][where]
            residuals.append((sent - np.clip(raw, -0.1, 0.1)).ravel())
            raw_values.append((sent - raw).ravel())
        for name, raw in off.shared.items():
            residuals.append((on.shared[name] - np.clip(raw, -0.1, 0.1)).ravel())
    res = np.concatenate(residuals)
    assert res.size > 1500
    assert abs(res.mean()) < 0.03 and res.var() == pytest.approx(2 * 0.2 ** 2, rel=0.25)
    assert np.all(np.concatenate(raw_values) != 0)  # no raw gradient value leaves unperturbed


def test_pseudo_rows_hide_which_users_have_a_real_gradient() -> None:
    """Zero rows are never sent as zeros: n_pseudo of them go out with fake gradients, the rest stay home."""
    on_log, fed = _recorded(use_ldp=True, n_pseudo=5)
    off_log, _ = _recorded(use_ldp=False)
    for party in ("party0", "party1"):
        on, off = _upload(on_log, party), _upload(off_log, party)
        pseudo = np.setdiff1d(on.rows, off.rows)
        assert pseudo.size == 5 and np.all(pseudo >= N_USERS)  # drawn among the silent users only
        assert np.all(np.isin(off.rows, np.arange(N_USERS)))
        rows = np.isin(on.rows, pseudo)
        assert np.all(on.per_user["user_emb"][rows] != 0)
        # a pseudo row is not told apart by its size: same spread as the real rows
        spread_fake = np.abs(on.per_user["user_emb"][rows]).mean()
        spread_real = np.abs(on.per_user["user_emb"][~rows]).mean()
        assert spread_fake == pytest.approx(spread_real, rel=0.3)
    assert fed.n_users == N_USERS + SILENT


def test_expansion_carries_pseudonyms_never_item_ids() -> None:
    """Relay uploads: 16-byte keyed pseudonyms, fresh every expansion, rows shuffled; downloads: no pseudonyms."""
    log, fed = _recorded(use_ldp=True, rounds=2)
    for party in ("party0", "party1"):
        first = log.find(party_id=party, step="expansion_upload", round_index=0)
        second = log.find(party_id=party, step="expansion_upload", round_index=1)
        assert isinstance(first, ExpansionUpload) and isinstance(second, ExpansionUpload)
        assert first.tokens.shape[1] == 16 and len({bytes(t) for t in first.tokens}) == first.tokens.shape[0]
        assert not {bytes(t) for t in first.tokens} & {bytes(t) for t in second.tokens}  # unlinkable
        data = next(p for p in fed.parties if p.party_id == party)
        assert not np.array_equal(first.edge_users, data.train.users)  # edge order is not the party's order
        down = log.find(party_id=party, step="expansion_download", round_index=0)
        assert isinstance(down, ExpansionDownload) and not hasattr(down, "tokens")


def test_relay_delivers_the_other_partys_neighbourhoods() -> None:
    """Each download edge (u, row) carries the embedding of an item u rated at the other party."""
    log, fed = _recorded(use_ldp=True)
    up1 = log.find(party_id="party1", step="expansion_upload", round_index=0)
    down0 = log.find(party_id="party0", step="expansion_download", round_index=0)
    assert isinstance(up1, ExpansionUpload) and isinstance(down0, ExpansionDownload)
    token_of = {bytes(t): e.tobytes() for t, e in zip(up1.tokens, up1.embeddings)}
    sent = sorted((int(u), token_of[bytes(t)]) for u, t in zip(up1.edge_users, up1.edge_tokens))
    got = sorted((int(u), down0.embeddings[r].tobytes()) for u, r in zip(down0.edge_users, down0.edge_rows))
    assert got == sent and down0.embeddings.shape[0] == up1.embeddings.shape[0]
    assert not np.array_equal(down0.embeddings, up1.embeddings)  # re-shuffled by the relay


def test_fedpergnn_trains() -> None:
    """Loss falls over rounds with the mechanisms on."""
    fed = tiny_federation()
    run = fedpergnn_federation(fed.parties, config=FedPerGNNConfig(train=TINY), global_mean=fed.global_mean)
    losses = [run.run_round(t).loss for t in range(12)]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])


def test_privacy_record_names_every_mechanism() -> None:
    """The record a run status would show."""
    rec = FedPerGNNConfig(train=TINY).privacy_record()
    assert rec["ldp"] == {"enabled": True, "clip": 0.1, "laplace_scale": 0.2, "grad_scale": TINY.grad_scale,  # type: ignore[index]
                          "epsilon_per_element": pytest.approx(1.0)}
    assert rec["pseudo_interactions"]["rows"] == 1000  # type: ignore[index]
