"""Social party: Paillier engine vs plaintext engine, DP budget, validation, graph construction."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp

from services.crypto.dp import clip_rows
from services.data.types import SocialLinks
from services.errors import CryptoError, PrivacyBudgetExhausted, ProtocolError, ValidationFailed
from services.p4gcn.backends import InProcessBackend, InProcessPaillierBackend
from services.p4gcn.engines import PlainEngine
from services.p4gcn.graph import adjacency_from_links, normalized_laplacian
from services.p4gcn.keys import PaillierSession
from services.p4gcn.party import SocialParty, SocialPartyConfig, paillier_social_party

N, D = 12, 4


@pytest.fixture(scope="module")
def keys() -> Iterator[PaillierSession]:
    """768-bit test key (never in production)."""
    session = PaillierSession.generate(768)
    yield session
    session.close()


def _graph() -> sp.csr_matrix:
    links = SocialLinks(np.array(["0", "1", "3", "5", "7", "9", "9", "2"]),
                        np.array(["1", "2", "4", "1", "8", "0", "0", "2"]), np.ones(8, dtype=np.float32))
    return adjacency_from_links(links, [str(k) for k in range(N)])


def _config(**kw: object) -> SocialPartyConfig:
    values: dict[str, object] = {"dim": D, "noise_multiplier": 1.0, "min_key_bits": 512, "planned_epochs": 2}
    values.update(kw)
    return SocialPartyConfig(**values)  # type: ignore[arg-type]


def _plain(**kw: object) -> SocialParty:
    return SocialParty(config=_config(**kw), adjacency=_graph(), engine=PlainEngine(1.0), rng=np.random.default_rng(5))


def test_graph_is_symmetric_without_self_loops() -> None:
    a = _graph()
    assert (a != a.T).nnz == 0 and a.diagonal().sum() == 0 and a.nnz == 2 * 6  # 9-0 twice, 2-2 loop dropped
    lap = normalized_laplacian(a).toarray()
    deg = np.asarray(a.sum(axis=1)).ravel() + 1
    assert np.allclose(np.diag(lap), 1 / deg) and np.allclose(lap, lap.T)


def test_paillier_backend_matches_plaintext_backend(keys: PaillierSession) -> None:
    enc_party = paillier_social_party(config=_config(), adjacency=_graph(), public_key=keys.public_key,
                                      h_s=keys.h_s, rng=np.random.default_rng(5))
    enc = InProcessPaillierBackend(enc_party, keys, clip_norm=1.0, chunk_rows=5)
    plain = InProcessBackend(_plain(), chunk_rows=5)
    rng = np.random.default_rng(0)
    x = clip_rows(rng.normal(size=(N, D)), 1.0)
    for b in (enc, plain):
        b.begin_epoch(x)
    users = np.array([1, 3, 4, 8])
    assert np.abs(enc.forward(users) - plain.forward(users)).max() < 1e-4  # same noise, fixed-point error only
    g = clip_rows(rng.normal(size=(4, D)), 1.0)
    assert np.abs(enc.backward(users, g) - plain.backward(users, g)).max() < 1e-4
    dx = clip_rows(x[users] + 0.2, 1.0) - x[users]
    enc.update_rows(users, dx)
    plain.update_rows(users, dx)
    other = np.array([0, 2, 9])
    assert np.abs(enc.forward(other) - plain.forward(other)).max() < 1e-4
    assert enc.traffic()["bytes_to_social"] > 0 and enc.privacy()["batches"] == 2


def test_noise_free_product_is_exact_math() -> None:
    party = _plain(dp_enabled=False)
    backend = InProcessBackend(party)
    x = clip_rows(np.random.default_rng(2).normal(size=(N, D)), 1.0)
    backend.begin_epoch(x)
    users = np.array([0, 1, 9])
    assert np.allclose(backend.forward(users), party.laplacian[users] @ x @ party.w_p2)
    g = np.eye(3, D) * 0.5
    block = party.laplacian[users][:, users]
    assert np.allclose(backend.backward(users, g), block @ g @ party.w_p2.T)
    assert party.privacy_record()["epsilon_spent"] is None and party.sigma == 0.0


def test_budget_exhaustion_raises_with_figures() -> None:
    party = _plain(noise_multiplier=None, epsilon_budget=4.0, planned_epochs=2)
    backend = InProcessBackend(party)
    x = clip_rows(np.ones((N, D)), 1.0)
    for epoch in range(2):
        backend.begin_epoch(x)
        backend.forward(np.array([0, 1]))
        backend.forward(np.array([2, 3]))  # same epoch, disjoint users: no extra charge
    assert party.privacy_record()["epsilon_spent"] <= 4.0
    backend.begin_epoch(x)
    with pytest.raises(PrivacyBudgetExhausted) as err:
        backend.forward(np.array([4]))
    assert err.value.extra["epsilon_budget"] == 4.0 and err.value.extra["epsilon_spent"] <= 4.0


def test_sequential_composition_charges_every_batch() -> None:
    party = _plain(composition="sequential")
    backend = InProcessBackend(party)
    backend.begin_epoch(clip_rows(np.ones((N, D)), 1.0))
    backend.forward(np.array([0, 1]))
    backend.forward(np.array([0, 2]))  # users may repeat under sequential composition
    assert party.accountant.batches == 2


def test_validation_errors(keys: PaillierSession) -> None:
    party = _plain()
    with pytest.raises(ProtocolError):
        party.upload_x(0, np.zeros((2, D)))  # no epoch open
    party.begin_epoch()
    with pytest.raises(ValidationFailed):
        party.upload_x(0, np.ones((2, D)))  # rows above the clipping norm
    with pytest.raises(ValidationFailed):
        party.upload_x(0, np.zeros((2, D + 1)))
    with pytest.raises(ProtocolError):
        party.forward(np.array([0]))  # X incomplete
    party.upload_x(0, np.zeros((N, D)))
    for bad in (np.array([N]), np.array([1, 1]), np.array([], dtype=np.int64), np.array([0.5])):
        with pytest.raises(ValidationFailed):
            party.forward(bad)
    with pytest.raises(ProtocolError):
        party.backward(np.array([0]), np.zeros((1, D)))  # no forward yet
    party.forward(np.array([0, 1]))
    with pytest.raises(ProtocolError):
        party.forward(np.array([1, 2]))  # user 1 already released this epoch
    with pytest.raises(ValidationFailed):
        party.forward(np.arange(N + 1) % N)
    with pytest.raises(CryptoError):
        paillier_social_party(config=_config(min_key_bits=2048), adjacency=_graph(), public_key=keys.public_key,
                              h_s=keys.h_s, rng=np.random.default_rng(0))


def test_encrypted_chunks_are_checked(keys: PaillierSession) -> None:
    party = paillier_social_party(config=_config(), adjacency=_graph(), public_key=keys.public_key, h_s=keys.h_s,
                                  rng=np.random.default_rng(0))
    party.begin_epoch()
    with pytest.raises(CryptoError):
        party.upload_x(0, keys.encrypt(np.full((N, D), 0.9), 2.0))  # declared bound above C
    with pytest.raises(ProtocolError):
        party.upload_x(0, np.zeros((N, D)))  # plaintext sent to the encrypted engine
    other = PaillierSession.generate(512)
    try:
        with pytest.raises(CryptoError):
            party.upload_x(0, other.encrypt(np.zeros((N, D)), 1.0))
    finally:
        other.close()


def test_forward_only_session_halves_releases() -> None:
    party = _plain(backward_enabled=False, noise_multiplier=None, planned_epochs=3)
    both = _plain(noise_multiplier=None, planned_epochs=3)
    assert party.noise_multiplier < both.noise_multiplier  # 3 releases instead of 6 for the same budget
    backend = InProcessBackend(party)
    backend.begin_epoch(clip_rows(np.ones((N, D)), 1.0))
    backend.forward(np.array([0]))
    with pytest.raises(ProtocolError):
        backend.backward(np.array([0]), np.zeros((1, D)))
