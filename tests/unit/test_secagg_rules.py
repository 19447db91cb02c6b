"""Issue 32's party-side rules, below HTTP: who is trusted as a peer, and the masked-value record kept over restarts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.crypto.secagg import SecAggParty
from services.db.session import make_engine, make_sessionmaker, migrate
from services.errors import ProtocolError
from services.crypto.secagg import encode_fixed
from services.federation.aggregation import Contribution, MaskedUpload, ValueLedger, inputs_digest
from services.federation.links import Step
from services.federation.messages import KeyAnnouncementModel
from services.party.federation import FederationService

NAMES = ["p0", "p1", "p2"]


def _announce(party_id: str, secret: bytes | None = None) -> KeyAnnouncementModel:
    a = SecAggParty(party_id=party_id, secret=secret or party_id.encode() * 16, run_id="r").announce()
    return KeyAnnouncementModel(party_id=a.party_id, dh_public=a.dh_public, identity=a.identity, signature=a.signature)


def _service(tmp_path: Path, **kw: object) -> FederationService:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrate(url)
    return FederationService(sessions=make_sessionmaker(make_engine(url)), party_id="p0", rating_min=1.0,
                             rating_max=5.0, **kw)  # type: ignore[arg-type]


def test_outside_dev_mode_unpinned_peers_are_refused(tmp_path: Path) -> None:
    service = _service(tmp_path)
    with service.sessions() as session, pytest.raises(ProtocolError, match="trust on first use is dev mode only"):
        service._check_identities(session, [_announce(p) for p in NAMES], None)


def test_pinned_identities_accept_no_other_id_even_in_dev_mode(tmp_path: Path) -> None:
    pins = {p: _announce(p).identity for p in ("p1", "p2")}
    service = _service(tmp_path, peer_identities=pins, dev_mode=True)
    with service.sessions() as session:
        assert service._check_identities(session, [_announce(p) for p in NAMES], None) == pins
        with pytest.raises(ProtocolError, match="pinned identities"):
            service._check_identities(session, [_announce(p) for p in NAMES] + [_announce("p9")], None)


def test_dev_mode_trusts_on_first_use_within_the_fixed_peer_set(tmp_path: Path) -> None:
    service = _service(tmp_path, dev_mode=True)
    with service.sessions() as session:
        seen = service._check_identities(session, [_announce(p) for p in NAMES], None)
        assert seen == {p: _announce(p).identity for p in ("p1", "p2")}
        with pytest.raises(ProtocolError, match="peer set was fixed at configuration"):
            service._check_identities(session, [_announce("p0"), _announce("p9")], NAMES)
        assert service._check_identities(session, [_announce("p0"), _announce("p1")], NAMES)  # leaving one out


def test_the_masked_value_record_survives_a_restart() -> None:
    sec = {p: SecAggParty(party_id=p, secret=p.encode() * 16, run_id="r") for p in NAMES}
    for s in sec.values():
        s.accept([t.announce() for t in sec.values()])
    ups = {p: MaskedUpload(secagg=sec[p], parties=NAMES, version=lambda step: 7) for p in NAMES}
    opened = {p: u.open_round(Step("begin", 3), NAMES, ["projection|0"]) for p, u in ups.items()}
    inbox = {p: opened[p]["secagg"]["sealed"]["p0"] for p in ("p1", "p2")}
    ups["p0"].wrap(Step("projection", 3, 0, 0), {"participants": NAMES, "sealed_in": inbox},
                   Contribution(vector=lambda: np.ones(4), message=dict))
    again = MaskedUpload(secagg=sec["p0"], parties=NAMES, version=lambda step: 7)  # the party restarted
    again.load(ups["p0"].export())
    with pytest.raises(ProtocolError, match="one mask per value"):
        again.open_round(Step("begin", 4), ["p0", "p1"], ["projection|0"])
    with pytest.raises(ProtocolError, match="outside the peer set"):
        again.open_round(Step("begin", 4), ["p0", "p9"], ["projection|0"])
    with pytest.raises(ProtocolError, match="at least 2 parties"):
        again.open_round(Step("begin", 4), ["p0"], ["projection|0"])
    assert again.open_round(Step("begin", 4), NAMES, ["projection|0"])["secagg"]["threshold"] == 2


def test_a_state_version_stays_bound_to_its_set_whatever_public_parameters_a_begin_carries() -> None:
    """Q1 of issue 39: nudged public parameters do not make another value (layer 0 never reads them, and a nudge
    makes a nearly equal value), so a state version masked for one set is refused for any other, in memory, after
    a restart, and in the records of earlier releases (keyed with an inputs digest)."""
    sec = {p: SecAggParty(party_id=p, secret=p.encode() * 16, run_id="r") for p in NAMES}
    for s in sec.values():
        s.accept([t.announce() for t in sec.values()])
    ups = {p: MaskedUpload(secagg=sec[p], parties=NAMES, version=lambda step: 7) for p in NAMES}
    pair = ["p0", "p2"]
    before = inputs_digest({"public": {"items": np.zeros((3, 2), np.float32)}})
    after = inputs_digest({"public": {"items": np.full((3, 2), 0.5, np.float32)}})
    opened = {p: ups[p].open_round(Step("begin", 6), pair, ["projection|0"], inputs=before) for p in pair}
    ups["p0"].wrap(Step("projection", 6, 0, 0), {"participants": pair, "sealed_in": {"p2": opened["p2"]["secagg"]
                                                                                           ["sealed"]["p0"]}},
                   Contribution(vector=lambda: np.ones(4), message=dict))
    for inputs in (before, after):
        with pytest.raises(ProtocolError, match="one mask per value"):
            ups["p0"].open_round(Step("begin", 6, attempt=1), NAMES, ["projection|0"], inputs=inputs)
    again = MaskedUpload(secagg=sec["p0"], parties=NAMES, version=lambda step: 7)
    again.load(ups["p0"].export())
    with pytest.raises(ProtocolError, match="one mask per value"):
        again.open_round(Step("begin", 7), NAMES, ["projection|0"], inputs=after)
    assert again.open_round(Step("begin", 7), pair, ["projection|0"], inputs=after)["secagg"]["threshold"] == 2
    for legacy_record in ({"holders": {"7": pair}, "sets": [[7, "projection|0", pair]]},
                          {"holders": [[7, before, pair]], "sets": [[7, before, "projection|0", pair]]}):
        legacy = MaskedUpload(secagg=sec["p0"], parties=NAMES, version=lambda step: 7)
        legacy.load(legacy_record)
        with pytest.raises(ProtocolError, match="one mask per value"):
            legacy.open_round(Step("begin", 7), NAMES, ["projection|0"], inputs=after)


def test_an_exact_value_is_masked_for_one_set_only_across_runs() -> None:
    """Q2 of issue 39: a new run (another id, another state version) that makes the party compute a value it
    already masked gets it masked for the first set only; the ledger is party-wide."""
    ledger = ValueLedger()
    runs = {}
    for run_id in ("ra", "rb"):
        sec = {p: SecAggParty(party_id=p, secret=p.encode() * 16, run_id=run_id) for p in NAMES}
        for s in sec.values():
            s.accept([t.announce() for t in sec.values()])
        runs[run_id] = ({p: MaskedUpload(secagg=sec[p], parties=NAMES, version=lambda step: 1,
                                         ledger=ledger if p == "p0" else None) for p in NAMES})

    def mask(run_id: str, names: list[str]) -> dict[str, object]:
        ups = runs[run_id]
        opened = {p: ups[p].open_round(Step("begin", 0), names, ["projection|0"]) for p in names}
        inbox = {p: opened[p]["secagg"]["sealed"]["p0"] for p in names if p != "p0"}
        return ups["p0"].wrap(Step("projection", 0, 0, 0), {"participants": names, "sealed_in": inbox},
                              Contribution(vector=lambda: np.arange(4.0), message=dict))

    assert "masked" in mask("ra", ["p0", "p1"])
    assert set(ledger.drain()) == {ValueLedger.digest(encode_fixed(np.arange(4.0)))}
    with pytest.raises(ProtocolError, match=r"this exact projection\|0 value was already masked"):
        mask("rb", ["p0", "p2"])
    assert not ledger.drain()  # a refused value is not recorded for the other set

