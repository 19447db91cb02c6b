"""N1: a coordinator that deviates from the protocol cannot unmask one party's value (double masking).

The second probe's sequence: after party0's masked upload, ask party1 to "recover" party0, and ask
for a re-mask of the same value under another attempt with another participant set. The party side
here is the code the HTTP parties run (`VerFedGNNParty` behind `MaskedUpload`); the coordinator is
played by hand, step by step, and deviates. Shares leave a party only after the consistency round
(every survivor signs the survivor set; t signatures over the set the party signed itself).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.crypto.secagg import SecAggParty, decode_fixed, prg, step_context
from services.errors import ProtocolError
from services.federation.aggregation import MaskedSum, MaskedUpload
from services.federation.links import Message, Step
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.secure import agree_in_process
from tests.support.federation import COORD_TOKEN, TINY_CONFIG, Federation, federation
from tests.unit.verfedgnn.test_engine import tiny_parties

CFG = TrainConfig(model="gcn", dim=4, layers=2, thd=1.0, seed=2)
NAMES = ["p0", "p1", "p2"]


def _federation(masked: bool) -> InProcessFederation:
    datas = tiny_parties(items=(12, 8, 10))
    coord = CoordinatorTrainer(config=CFG, n_users=40, global_mean=3.0, item_counts={p.party_id: p.n_items for p in datas})
    trainers = {p.party_id: PartyTrainer(config=CFG, data=p, seed=CFG.seed) for p in datas}
    if not masked:
        return InProcessFederation(coordinator=coord, parties=trainers)
    sec = {p: SecAggParty(party_id=p, secret=p.encode() * 16, run_id="r") for p in trainers}
    agree_in_process(sec, run_seed=CFG.seed)
    masks = {p: MaskedUpload(secagg=sec[p], parties=NAMES) for p in trainers}
    return InProcessFederation(coordinator=coord, parties=trainers, aggregations=masks, aggregation=MaskedSum())


def _true_projection(party: str) -> np.ndarray:
    plain = _federation(masked=False)
    trainer = plain.parties[party]
    trainer.begin_round(round_index=0, public=plain.coordinator.public_params())
    return trainer.layer_projection(layer=0).astype(np.float64).ravel()


def _begin(fed: InProcessFederation, attempt: int, names: list[str]) -> dict[str, Message]:
    step = Step("begin", 0, attempt)
    answers = {p: fed.links[p].call(step, {"public": fed.coordinator.public_params(), "participants": names})
               for p in names}
    return answers


def _sign(fed: InProcessFederation, names: list[str], survivors: list[str], step: Step) -> dict[str, str]:
    """The consistency round of `step`, played honestly at `names` for one survivor set."""
    check = Step("consistency:" + step.name, step.round_index, step.attempt, step.layer)
    return {p: fed.links[p].call(check, {"survivors": survivors})["signature"] for p in names}


def _inbox(answers: dict[str, Message], recipient: str) -> dict[str, str]:
    return {sender: a["secagg"]["sealed"][recipient] for sender, a in answers.items() if sender != recipient}


def test_recovery_of_a_party_that_did_not_drop_reveals_nothing_of_it() -> None:
    fed = _federation(masked=True)
    opened = _begin(fed, 0, NAMES)
    step = Step("projection", 0, 0, 0)
    masked = {p: np.asarray(fed.links[p].call(step, {"participants": NAMES, "sealed_in": _inbox(opened, p)})["masked"])
              for p in ["p0"]}
    reveal = Step("recovery:projection", 0, 0, 0)
    # the probe's request: party1 asked to "recover" party0 right after party0's upload; party1 masked nothing yet
    with pytest.raises(ProtocolError, match="not masked here"):
        fed.links["p1"].call(reveal, {"survivors": ["p1", "p2"], "dropped": ["p0"]})
    with pytest.raises(ProtocolError, match="not masked here"):
        _sign(fed, ["p1"], ["p1", "p2"], step)
    for p in ("p1", "p2"):
        masked[p] = np.asarray(fed.links[p].call(step, {"participants": NAMES, "sealed_in": _inbox(opened, p)})["masked"])
    # without the consistency round (no signatures, or fewer than t), nothing is revealed
    with pytest.raises(ProtocolError, match="consistency round"):
        fed.links["p1"].call(reveal, {"survivors": ["p1", "p2"], "dropped": ["p0"]})
    # the coordinator lies to the others that p0 dropped: both sign {p1, p2} (a set of t parties), and it
    # gets p0's step key (t = 2 of 3 shares) ...
    sigs = _sign(fed, ["p1", "p2"], ["p1", "p2"], step)
    lies = {p: fed.links[p].call(reveal, {"survivors": ["p1", "p2"], "dropped": ["p0"], "signatures": sigs})
            for p in ("p1", "p2")}
    from services.crypto.double_mask import combine_private, public_key, step_pair_key

    private = combine_private([a["key"]["p0"] for a in lies.values()], threshold=2)
    assert public_key(private).hex() == opened["p0"]["secagg"]["publics"]["projection|0"]
    ctx = step_context(round_index=0, attempt=0, step="projection", layer=0)
    size = masked["p0"].size
    pairwise = np.zeros(size, dtype=np.uint64)
    for v in ("p1", "p2"):
        public = bytes.fromhex(opened[v]["secagg"]["publics"]["projection|0"])
        pairwise += prg(step_pair_key(private, public, context=ctx, ids=("p0", v)), ctx, size)  # p0 < v: +
    # ... and removes p0's pairwise masks: p0's self mask still hides its projection
    guess = decode_fixed(masked["p0"] - pairwise)
    y0 = _true_projection("p0")
    assert np.max(np.abs(guess - y0)) > 1e3
    # the self-mask seed of p0 needs 2 shares: p1 and p2 already answered another partition and refuse,
    # and they sign no other survivor set for the step
    for p in ("p1", "p2"):
        with pytest.raises(ProtocolError, match="already unmasked"):
            fed.links[p].call(reveal, {"survivors": NAMES, "dropped": [], "signatures": sigs})
        with pytest.raises(ProtocolError, match="already signed"):
            _sign(fed, [p], NAMES, step)
    # p0 signs the whole set, but its own signature (and the others' over another set) is one of the 2 needed
    own = _sign(fed, ["p0"], NAMES, step)
    with pytest.raises(ProtocolError, match="1 valid signatures"):
        fed.links["p0"].call(reveal, {"survivors": NAMES, "dropped": [], "signatures": {**sigs, **own}})
    assert all("p0" not in a["seed"] for a in lies.values())  # not one share of p0's self-mask seed left


def test_a_value_is_never_masked_again_for_another_participant_set() -> None:
    fed = _federation(masked=True)
    opened = _begin(fed, 0, NAMES)
    step = Step("projection", 0, 0, 0)
    fed.links["p0"].call(step, {"participants": NAMES, "sealed_in": _inbox(opened, "p0")})
    # a new attempt of the same round, without p2: the same Y_p0 masked for {p0, p1} would differ from the
    # first sum by p2's value; the party refuses the begin (one mask per value) ...
    with pytest.raises(ProtocolError, match="one mask per value.*already masked"):
        _begin(fed, 1, ["p0", "p1"])
    # ... and a masked step of another set within the value's own attempt
    with pytest.raises(ProtocolError, match="already masked"):
        fed.links["p0"].call(step, {"participants": ["p0", "p1"], "sealed_in": _inbox(opened, "p0")})


def test_key_shares_from_outside_the_attempt_are_refused() -> None:
    fed = _federation(masked=True)
    opened = _begin(fed, 0, ["p0", "p1"])
    inbox = _inbox(opened, "p0") | {"p2": "00" * 40}  # the coordinator adds a party it runs
    with pytest.raises(ProtocolError, match="not a participant"):
        fed.links["p0"].call(Step("projection", 0, 0, 0), {"participants": NAMES, "sealed_in": inbox})


def test_an_honest_round_still_unmasks_and_matches_the_plain_round() -> None:
    plain, masked = _federation(masked=False), _federation(masked=True)
    a, b = plain.run_round(0), masked.run_round(0)
    assert b.rmse["train"] == pytest.approx(a.rmse["train"], abs=1e-6)


def test_the_probes_request_sequence_over_http_reveals_nothing(tmp_path: Path) -> None:
    """The probe's requests against live parties after a finished secure run (coordinator credential)."""
    with federation(tmp_path, n_parties=2) as fed:
        run = fed.client.create_run(rounds=2, min_parties=2, seed=3, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=120)
        assert status["state"] == "completed", status["detail"]
        headers = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
        base = {p: f"{fed.parties[p].url}/v1/federation/runs/{run['run_id']}/rounds/6/steps" for p in ("p0", "p1")}
        # public parameters of the run's size: taken from what the coordinator would send
        public = {k: np.zeros(v.shape, np.float32) for k, v in _public_shapes(fed, run["run_id"]).items()}
        opened = {}
        for p in ("p0", "p1"):
            answer = fed.http.post(f"{base[p]}/begin?attempt=0", headers=headers,
                                   content=pack_tree({"public": public, "participants": ["p0", "p1"]}))
            assert answer.status_code == 200, answer.text
            opened[p] = unpack_tree(answer.content)
        inbox = {"p1": opened["p1"]["secagg"]["sealed"]["p0"]}
        masked = fed.http.post(f"{base['p0']}/projection?attempt=0&layer=0", headers=headers,
                               content=pack_tree({"participants": ["p0", "p1"], "sealed_in": inbox}))
        assert masked.status_code == 200, masked.text
        # party1 asked to "recover" party0: it masked nothing at that step, so it reveals nothing
        recover = fed.http.post(f"{base['p1']}/recovery:projection?attempt=0&layer=0", headers=headers,
                                content=pack_tree({"survivors": ["p1"], "dropped": ["p0"]}))
        assert recover.status_code == 409 and recover.json()["code"] == "protocol_error", recover.text
        # party0 itself, told that p1 dropped: a survivor set below the threshold (2 of 2) is neither signed
        # nor answered, so not even its one share of p1's step key leaves
        sign = fed.http.post(f"{base['p0']}/consistency:projection?attempt=0&layer=0", headers=headers,
                             content=pack_tree({"survivors": ["p0"]}))
        assert sign.status_code == 409 and "consistency round" in sign.json()["detail"], sign.text
        own = fed.http.post(f"{base['p0']}/recovery:projection?attempt=0&layer=0", headers=headers,
                            content=pack_tree({"survivors": ["p0"], "dropped": ["p1"], "signatures": {}}))
        assert own.status_code == 409 and "consistency round" in own.json()["detail"], own.text
        # the other partition (p0 and p1 survivors) with p0's signature alone: 1 of the 2 needed
        sign = fed.http.post(f"{base['p0']}/consistency:projection?attempt=0&layer=0", headers=headers,
                             content=pack_tree({"survivors": ["p0", "p1"]}))
        assert sign.status_code == 200, sign.text
        again = fed.http.post(f"{base['p0']}/recovery:projection?attempt=0&layer=0", headers=headers,
                              content=pack_tree({"survivors": ["p0", "p1"], "dropped": [],
                                                 "signatures": {"p0": unpack_tree(sign.content)["signature"]}}))
        assert again.status_code == 409 and "1 valid signatures" in again.json()["detail"], again.text


def _public_shapes(fed: Federation, run_id: str) -> dict[str, np.ndarray]:
    """The run's public parameter shapes (the model the coordinator built)."""
    from models.vertical import build_public
    from services.verfedgnn.config import model_config, run_config

    status = fed.client.run(run_id)
    config = run_config({k: v for k, v in TINY_CONFIG.items()}, seed=3, rounds=2)
    return build_public(config=model_config(config), n_users=status["n_users"], seed=0).arrays()
