"""Masked rounds: same training as plain rounds, the coordinator never holds a per-party value, drop-outs recovered."""

from __future__ import annotations


import numpy as np
import pytest

from services.crypto.secagg import SecAggParty, decode_fixed
from services.errors import ProtocolError
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation, run_round
from services.federation.aggregation import MaskedSum, MaskedUpload
from services.federation.links import Link, MessageLog, RecordingLink
from services.coordinator.runner import retry_clients
from services.verfedgnn.secure import agree_in_process
from tests.unit.verfedgnn.test_engine import tiny_parties
from tests.unit.verfedgnn.test_rounds import FailingLink

CFG = TrainConfig(model="gcn", dim=4, layers=2, thd=1.0, seed=2)


def pair(config: TrainConfig = CFG) -> tuple[InProcessFederation, InProcessFederation]:
    """The same parties twice: a plain and a masked federation (same seeds)."""
    datas = tiny_parties(items=(12, 8, 10))

    def build() -> tuple[CoordinatorTrainer, dict[str, PartyTrainer]]:
        coord = CoordinatorTrainer(config=config, n_users=40, global_mean=3.0,
                                   item_counts={p.party_id: p.n_items for p in datas})
        return coord, {p.party_id: PartyTrainer(config=config, data=p, seed=config.seed) for p in datas}

    c1, t1 = build()
    c2, t2 = build()
    sec = {p: SecAggParty(party_id=p, secret=p.encode() * 16, run_id="r") for p in t2}
    agree_in_process(sec, run_seed=config.seed)
    masks = {p: MaskedUpload(secagg=sec[p], parties=sorted(t2)) for p in t2}
    return (InProcessFederation(coordinator=c1, parties=t1),
            InProcessFederation(coordinator=c2, parties=t2, aggregations=masks, aggregation=MaskedSum()))


def test_masked_rounds_train_like_plain_rounds() -> None:
    plain, masked = pair()
    for t in range(4):
        a, b = plain.run_round(t), masked.run_round(t)
        assert a.participants == b.participants
        for split in ("train", "valid", "test"):
            assert b.rmse[split] == pytest.approx(a.rmse[split], abs=1e-6)
        assert b.loss == pytest.approx(a.loss, rel=1e-6)
        assert b.per_party == {}  # the coordinator cannot tell the parties' figures apart
    pa, pb = plain.coordinator.public_params(), masked.coordinator.public_params()
    for k in pa:
        np.testing.assert_allclose(pb[k], pa[k], atol=1e-5)


def test_wire_audit_no_unmasked_per_party_value_reaches_the_coordinator() -> None:
    plain, masked = pair()
    log = MessageLog(keep=lambda r: r.direction == "up")
    masked.links = {p: RecordingLink(link, log) for p, link in masked.links.items()}
    masked.run_round(0)
    seen = [np.asarray(r.payload["masked"]) for r in log.records if r.step.name in ("projection", "finish")]
    # up: masked vectors, the begin's public step keys and sealed shares, the consistency round's
    # signatures over the survivor set with the signed note of an earlier sum the value was unmasked in (none in
    # a fresh round), and nothing else at that step; the survivors' seed shares
    assert all(set(r.payload) <= {"masked", "secagg", "seed", "key", "signature", "repeat"} for r in log.records)
    assert all(set(r.payload) == {"signature", "repeat"} and r.payload["repeat"] == ""
               for r in log.records if r.step.name.startswith("consistency:"))
    assert all(not r.payload.get("key") for r in log.records if r.step.name.startswith("recovery:"))
    for p, trainer in plain.parties.items():  # what each party would have sent in the clear
        trainer.begin_round(round_index=0, public=plain.coordinator.public_params())
        y = trainer.layer_projection(layer=0).astype(np.float64).ravel()
        for v in seen:
            if v.size == y.size:
                assert np.max(np.abs(decode_fixed(v) - y)) > 1e3  # uniform over the ring, nowhere near Y_p
    assert len(seen) == 3 * 3  # 3 parties × (2 layers + finish), each masked


def fail(links: dict[str, Link], party: str, step: str) -> dict[str, Link]:
    return {p: FailingLink(link, step) if p == party else link for p, link in links.items()}


@pytest.mark.parametrize("step", ["projection[1]", "finish"])
def test_a_party_dropping_mid_round_is_recovered_and_matches_the_plain_round(step: str) -> None:
    plain, masked = pair()
    a = run_round(coord=plain.coordinator, links={p: FailingLink(l, step) if p == "p1" else l
                                                   for p, l in plain.links.items()}, round_index=0, min_parties=2)
    b = run_round(coord=masked.coordinator, links=fail(masked.links, "p1", step), round_index=0,
                  min_parties=2, aggregation=MaskedSum())
    assert a.metrics is not None and b.metrics is not None
    assert b.participants == ["p0", "p2"] and "p1" in b.failures
    assert b.metrics.rmse["train"] == pytest.approx(a.metrics.rmse["train"], abs=1e-6)
    nxt = masked.run_round(1)  # the run goes on with every party
    assert nxt.participants == ["p0", "p1", "p2"]


def test_a_lone_survivor_never_sends_its_value() -> None:
    _, masked = pair()
    out = run_round(coord=masked.coordinator, links=fail(fail(masked.links, "p1", "projection[0]"), "p2",
                                                         "projection[0]"), round_index=0, min_parties=1,
                    aggregation=MaskedSum())
    assert out.metrics is None  # one party left: abandoned, never unmasked


def test_with_dp_only_training_sums_leave_the_party_and_its_data_is_randomized() -> None:
    from services.verfedgnn.private_data import training_data

    config = CFG.model_copy(update={"dp_epsilon": 1.0})
    _, masked = pair(config)
    m = masked.run_round(0)
    assert np.isfinite(m.rmse["train"]) and np.isnan(m.rmse["valid"]) and np.isnan(m.rmse["test"])
    assert all(t.last_metrics["test"].count > 0 for t in masked.parties.values())  # kept for local evaluation
    data = tiny_parties()[0]
    noisy = training_data(data, config=config, local_seed=5)
    assert noisy.train.users.size != data.train.users.size or not np.array_equal(noisy.train.items, data.train.items)
    again = training_data(data, config=config, local_seed=5)
    assert np.array_equal(noisy.train.items, again.train.items)  # one randomization per run, reproducible
    assert training_data(data, config=CFG, local_seed=5) is data  # DP off: untouched


def test_a_round_retried_after_a_masked_attempt_goes_to_the_set_that_masked_and_completes() -> None:
    """p1 is down at begin and p2 drops after masking its layer-0 projection: the attempt is abandoned with
    p0 and p2 bound to {p0, p2} for this round. A retry over all three is refused by both (one mask per
    value), so the run could never go on; the retry the runner makes, over the bound set, completes."""
    _, masked = pair()
    first = run_round(coord=masked.coordinator, links=fail(fail(masked.links, "p1", "begin"), "p2", "total[0]"),
                      round_index=0, attempt=0, min_parties=2, aggregation=MaskedSum())
    assert first.metrics is None and first.masked_with == ["p0", "p2"]
    everyone = run_round(coord=masked.coordinator, links=masked.links, round_index=0, attempt=1, min_parties=2,
                         aggregation=MaskedSum())
    assert everyone.metrics is None
    assert all("one mask per value" in everyone.failures[p] for p in ("p0", "p2"))
    bound = retry_clients(masked.links, first.masked_with)
    assert sorted(bound) == ["p0", "p2"]
    retried = run_round(coord=masked.coordinator, links=bound, round_index=0, attempt=2, min_parties=2,
                        aggregation=MaskedSum())
    assert retried.metrics is not None and retried.participants == ["p0", "p2"]
    assert retry_clients(masked.links, ["p0", "p9"]) == masked.links  # a bound party gone: every enabled party
    assert masked.run_round(1).participants == ["p0", "p1", "p2"]  # the next round: everyone again
