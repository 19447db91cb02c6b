"""Social-party routes over real HTTP: auth, products against the plaintext reference, bad input, budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from party_api.main import create_app
from services.config import PartySettings
from services.crypto.dp import clip_rows
from services.data.types import SocialLinks
from services.db.session import migrate
from services.errors import NotFound, PrivacyBudgetExhausted
from services.p4gcn.graph import adjacency_from_links, normalized_laplacian
from services.p4gcn.http import HttpSocialBackend
from services.p4gcn.keys import PaillierSession
from services.protocol.social import encode_users
from tests.support.party import ADMIN, COORDINATOR, party_settings
from tests.support.servers import LiveServer, live_server

USERS = [f"u{k}" for k in range(10)]
LINKS = [("u0", "u1"), ("u1", "u2"), ("u3", "u4"), ("u5", "u1"), ("u6", "u7"), ("u8", "u0")]
DIM = 4


@pytest.fixture(scope="module")
def keys() -> Iterator[PaillierSession]:
    """A small (test-only) Paillier key for the rating party."""
    session = PaillierSession.generate(768)
    yield session
    session.close()


@pytest.fixture
def social(tmp_path: Path) -> Iterator[LiveServer]:
    """A live party with role=social (small test keys allowed) holding LINKS."""
    url = f"sqlite:///{tmp_path / 'social.db'}"
    migrate(url)
    # noise-free sessions allowed here so products can be compared exactly with the plaintext math;
    # a small body limit to test 413
    app = create_app(party_settings(url, role="social", paillier_min_key_bits=512, social_allow_no_dp=True,
                                    social_epsilon_total=1000.0, social_max_body_bytes=1 << 20))
    with live_server(app) as live:
        rows = [{"src_user_id": s, "dst_user_id": d, "weight": 1.0} for s, d in LINKS]
        r = httpx.post(f"{live.url}/v1/social-links", json={"rows": rows},
                       headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200, r.text
        yield live


def _backend(live: LiveServer, keys: PaillierSession, **kw: object) -> HttpSocialBackend:
    args: dict[str, object] = {"epsilon": 15.0, "delta": 1e-4, "planned_epochs": 2, "dim": DIM, "chunk_rows": 4}
    args.update(kw)
    return HttpSocialBackend(base_url=live.url, token=COORDINATOR, session=keys, user_ids=USERS, **args)  # type: ignore[arg-type]


def test_credentials_are_required(social: LiveServer) -> None:
    for headers, status in [({}, 401), ({"Authorization": "Bearer wrong"}, 403),
                            ({"Authorization": f"Bearer {ADMIN}"}, 403)]:
        r = httpx.post(f"{social.url}/v1/social/sessions", json={}, headers=headers)
        assert r.status_code == status


def test_products_match_plaintext_math(social: LiveServer, keys: PaillierSession) -> None:
    backend = _backend(social, keys, noise_multiplier=None, dp_enabled=False)
    rng = np.random.default_rng(1)
    x = clip_rows(rng.normal(size=(len(USERS), DIM)), 1.0)
    backend.begin_epoch(x)
    users = np.array([0, 1, 5])
    y = backend.forward(users)
    lap = normalized_laplacian(adjacency_from_links(
        SocialLinks(np.array([s for s, _ in LINKS]), np.array([d for _, d in LINKS]), np.ones(len(LINKS))), USERS))
    # W_P2 is secret to the social party; check the product through a least-squares fit of it.
    left = lap[users] @ x
    w_fit, *_ = np.linalg.lstsq(left, y, rcond=None)
    assert np.abs(left @ w_fit - y).max() < 1e-3
    g = clip_rows(rng.normal(size=(3, DIM)), 1.0)
    gx = backend.backward(users, g)
    assert gx.shape == (3, DIM)
    backend.update_rows(users, clip_rows(x[users] * 0.5, 1.0) - x[users])
    assert backend.privacy()["batches"] == 1
    assert backend.traffic()["bytes_to_social"] > 0


def test_malformed_and_oversized_input(social: LiveServer, keys: PaillierSession) -> None:
    backend = _backend(social, keys)
    base = f"{social.url}/v1/social/sessions/{backend.session_id}"
    auth = {"Authorization": f"Bearer {COORDINATOR}"}
    assert httpx.post(f"{base}/forward", content=b"not npy", headers=auth).status_code == 409  # ProtocolError
    assert httpx.put(f"{base}/x", content=b"\x00" * 10, headers=auth).status_code in (409, 422)
    assert httpx.post(f"{base}/forward", content=b"x" * ((1 << 20) + 1), headers=auth).status_code == 413
    streamed = httpx.post(f"{base}/forward", content=iter([b"x" * 65536] * 17), headers=auth)  # no length
    assert streamed.status_code == 413
    backend.begin_epoch(clip_rows(np.ones((len(USERS), DIM)), 1.0))
    bad_users = httpx.post(f"{base}/forward", content=encode_users(np.array([0, 99])), headers=auth)
    assert bad_users.status_code == 422
    missing = httpx.post(f"{social.url}/v1/social/sessions/nope/forward", content=b"x", headers=auth)
    assert missing.status_code == 404
    r = httpx.post(f"{social.url}/v1/social/sessions", headers=auth,
                   json={"user_ids": USERS, "public_key_n": "12", "h_s": "5x"})
    assert r.status_code == 422


def test_small_key_refused_outside_dev(tmp_path: Path, keys: PaillierSession) -> None:
    url = f"sqlite:///{tmp_path / 'prod.db'}"
    migrate(url)
    with live_server(create_app(party_settings(url, role="social"))) as live:
        r = httpx.post(f"{live.url}/v1/social/sessions", headers={"Authorization": f"Bearer {COORDINATOR}"},
                       json={"user_ids": USERS, "public_key_n": str(keys.public_key.n), "h_s": str(keys.h_s)})
        assert r.status_code == 422 and r.json()["code"] == "crypto_error"


def test_key_floor_is_a_setting(tmp_path: Path, keys: PaillierSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """PARTY_PAILLIER_MIN_KEY_BITS sets the floor (2048 by default, 512 in dev mode unless set)."""
    assert party_settings("sqlite://").paillier_min_key_bits == 2048
    assert PartySettings(database_url="sqlite://", dev_mode=True).paillier_min_key_bits == 512
    assert PartySettings(database_url="sqlite://", dev_mode=True, paillier_min_key_bits=4096).paillier_min_key_bits == 4096
    monkeypatch.setenv("PARTY_PAILLIER_MIN_KEY_BITS", "1024")
    assert party_settings("sqlite://").paillier_min_key_bits == 1024
    url = f"sqlite:///{tmp_path / 'floor.db'}"
    migrate(url)
    app = create_app(party_settings(url, role="social"))  # the 768-bit test key is below 1024
    with live_server(app) as live:
        r = _open(live.url, keys)
        assert r.status_code == 422 and r.json()["code"] == "crypto_error" and "1024" in r.json()["detail"]


def test_lifespan_builds_and_closes_the_social_service(social: LiveServer, keys: PaillierSession) -> None:
    """Sessions live in the service the lifespan built, and the lifespan closes them at shutdown."""
    service = social.server.config.app.state.social
    sid = _open(social.url, keys, dp_enabled=False).json()["session_id"]
    assert service.get(sid)
    social.stop()
    with pytest.raises(NotFound):
        service.get(sid)


def test_ratings_party_has_no_social_routes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ratings.db'}"
    migrate(url)
    with live_server(create_app(party_settings(url))) as live:
        r = httpx.post(f"{live.url}/v1/social/sessions", headers={"Authorization": f"Bearer {COORDINATOR}"}, json={})
        assert r.status_code == 404


def test_budget_exhaustion_is_409(social: LiveServer, keys: PaillierSession) -> None:
    # noise calibrated for 2 epochs at epsilon 5: a third epoch's first batch must be refused
    backend = _backend(social, keys, epsilon=5.0, noise_multiplier=None)
    x = clip_rows(np.ones((len(USERS), DIM)), 1.0)
    backend.begin_epoch(x)
    backend.forward(np.array([0, 1]))
    backend.begin_epoch(x)
    backend.forward(np.array([2, 3]))
    backend.begin_epoch(x)
    with pytest.raises(PrivacyBudgetExhausted) as err:
        backend.forward(np.array([4]))
    assert err.value.extra["epsilon_budget"] == 5.0
    r = httpx.post(f"{social.url}/v1/social/sessions/{backend.session_id}/forward", content=encode_users(np.array([5])),
                   headers={"Authorization": f"Bearer {COORDINATOR}"})
    assert r.status_code == 409 and r.json()["code"] == "privacy_budget_exhausted"
    assert r.json()["epsilon_spent"] <= 5.0


def test_trainer_runs_over_http(social: LiveServer, keys: PaillierSession) -> None:
    from models.p4gcn import P4GCNConfig
    from services.p4gcn.trainer import SocialData, SocialTrainConfig, SocialTrainer, Triples

    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(len(USERS)), 3)
    items = rng.integers(0, 6, users.size)
    tri = Triples(users, items, rng.uniform(0.5, 4.0, users.size).astype(np.float32))
    data = SocialData(np.array(USERS), 6, tri, tri, tri, adjacency_from_links(
        SocialLinks(np.array([s for s, _ in LINKS]), np.array([d for _, d in LINKS]), np.ones(len(LINKS))), USERS),
        0.5, 4.0)
    backend = _backend(social, keys, planned_epochs=2)
    cfg = SocialTrainConfig(epochs=2, user_batch=4, lr=0.01, backward_weight=0.5)
    result = SocialTrainer(data, model_config=P4GCNConfig(dim=DIM), config=cfg, backend=backend).fit()
    assert np.isfinite(result.rmse) and result.privacy["epochs"] == 2 and result.privacy["batches"] == 6
    assert result.privacy["epsilon_spent"] <= 15.0 and result.traffic["bytes_from_social"] > 0


def _open(url: str, keys: PaillierSession, **kw: object) -> httpx.Response:
    body: dict[str, object] = {"user_ids": USERS, "public_key_n": str(keys.public_key.n), "h_s": str(keys.h_s),
                               "dim": DIM, "epsilon": 15.0, "delta": 1e-4, "planned_epochs": 2}
    body.update(kw)
    return httpx.post(f"{url}/v1/social/sessions", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"},
                      timeout=60)


def test_lifetime_budget_is_persisted_and_refuses_new_sessions(tmp_path: Path, keys: PaillierSession) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate(url)
    settings = party_settings(url, role="social", paillier_min_key_bits=512, social_epsilon_total=20.0)
    auth = {"Authorization": f"Bearer {COORDINATOR}"}
    with live_server(create_app(settings)) as live:
        assert _open(live.url, keys, epsilon=15.0).status_code == 201
        refused = _open(live.url, keys, epsilon=15.0)
        assert refused.status_code == 409 and refused.json()["code"] == "privacy_budget_exhausted"
        assert refused.json()["epsilon_reserved"] == 15.0 and refused.json()["epsilon_total"] == 20.0
        noise_free = _open(live.url, keys, dp_enabled=False)  # the owner did not allow noise-free products
        assert noise_free.status_code == 403 and noise_free.json()["field"] == "dp_enabled"
        ledger = httpx.get(f"{live.url}/v1/social/budget", headers=auth).json()
        assert ledger["epsilon_reserved"] == 15.0 and ledger["epsilon_remaining"] == 5.0
        assert len(ledger["sessions"]) == 1
    # a restart (new app, same database) does not give the budget back
    with live_server(create_app(settings)) as live:
        assert httpx.get(f"{live.url}/v1/social/budget", headers=auth).json()["epsilon_reserved"] == 15.0
        assert _open(live.url, keys, epsilon=15.0).status_code == 409
        assert _open(live.url, keys, epsilon=5.0).status_code == 201
        assert httpx.get(f"{live.url}/v1/social/budget", headers=auth).json()["epsilon_remaining"] == 0.0
