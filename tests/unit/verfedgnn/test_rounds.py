"""The one round sequence: failures are data with their step, min_parties, and identical results on any fan-out."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.errors import ProtocolError
from services.verfedgnn.config import TrainConfig
from services.federation.fanout import fan_out
from services.federation.links import InProcessLink, Link, Message, Step
from services.verfedgnn.rounds import InProcessFederation, run_round
from tests.unit.verfedgnn.test_engine import federation, tiny_parties

CFG = TrainConfig(model="gcn", dim=4, layers=2, thd=1.0, seed=2)


class FailingLink:
    """A party that refuses one step of the round (as a crashed or out-of-sync party would)."""

    def __init__(self, inner: Link, fail_at: str) -> None:
        self.inner, self.fail_at = inner, fail_at

    @property
    def party_id(self) -> str:
        return self.inner.party_id

    def call(self, step: Step, message: Message) -> Message:
        label = step.name if step.layer < 0 else f"{step.name}[{step.layer}]"
        if label == self.fail_at:
            raise ProtocolError(f"{self.party_id} refuses {label}")
        return self.inner.call(step, message)


def three_parties() -> tuple[InProcessFederation, dict[str, Link]]:
    fed = federation(CFG, tiny_parties(items=(12, 8, 10)))
    return fed, dict(fed.links)


def test_a_failing_party_is_left_out_and_named_with_its_step() -> None:
    fed, links = three_parties()
    links["p2"] = FailingLink(links["p2"], "projection[1]")
    outcome = run_round(coord=fed.coordinator, links=links, round_index=0, min_parties=2)
    assert outcome.metrics is not None and outcome.participants == ["p0", "p1"]
    assert outcome.metrics.participants == ["p0", "p1"]
    assert outcome.failures == {"p2": "projection[1]: protocol_error: p2 refuses projection[1]"}
    assert fed.coordinator.round_index == 1


def test_below_min_parties_the_round_is_abandoned_before_aggregation() -> None:
    fed, links = three_parties()
    before = fed.coordinator.public_params()
    links["p0"] = FailingLink(links["p0"], "finish")
    outcome = run_round(coord=fed.coordinator, links=links, round_index=0, min_parties=3)
    assert outcome.metrics is None and outcome.participants == ["p1", "p2"]
    assert set(outcome.failures) == {"p0"} and outcome.failures["p0"].startswith("finish: ")
    after = fed.coordinator.public_params()
    assert fed.coordinator.round_index == 0 and all(np.array_equal(before[k], after[k]) for k in before)


def test_in_process_federation_raises_when_a_party_fails() -> None:
    fed, _ = three_parties()
    fed.links["p1"] = FailingLink(InProcessLink("p1", fed.handlers["p1"]), "begin")
    with pytest.raises(ProtocolError, match="begin: protocol_error: p1 refuses begin"):
        fed.run_round(0)


def test_parallel_fan_out_gives_the_same_rounds_bit_for_bit() -> None:
    results = []
    for pool in (None, ThreadPoolExecutor(max_workers=3)):
        fed, links = three_parties()
        metrics = [run_round(coord=fed.coordinator, links=links, round_index=t, pool=pool).metrics
                   for t in range(2)]
        results.append((metrics, fed.coordinator.public_params()))
        if pool is not None:
            pool.shutdown()
    (m_seq, p_seq), (m_par, p_par) = results
    assert m_seq == m_par
    assert all(np.array_equal(p_seq[k], p_par[k]) for k in p_seq)


def test_fan_out_collects_results_and_reasons_in_id_order() -> None:
    def call(x: int) -> int:
        if x == 0:
            raise ProtocolError("zero refused")
        if x < 0:
            raise RuntimeError("negative")
        return 10 * x

    targets = {"c": 3, "a": 0, "b": -1, "d": 1}
    with ThreadPoolExecutor(max_workers=2) as pool:
        parallel = fan_out(pool, targets, call)
    sequential = fan_out(None, targets, call)
    assert parallel == sequential
    results, failures = sequential
    assert list(results) == ["c", "d"] and results == {"c": 30, "d": 10}
    assert failures == {"a": "protocol_error: zero refused", "b": "RuntimeError: negative"}


def test_fan_out_deadline_keeps_the_answers_in_time() -> None:
    import threading
    import time

    release = threading.Event()

    def call(x: int) -> int:
        if x < 0:
            release.wait(10)  # a party that does not answer in time
        return x

    with ThreadPoolExecutor(max_workers=3) as pool:
        started = time.monotonic()
        results, failures = fan_out(pool, {"a": 1, "b": -1, "c": 2}, call, deadline_s=0.3)
        elapsed = time.monotonic() - started
        release.set()
    assert results == {"a": 1, "c": 2}
    assert failures == {"b": "party_unavailable: no answer within 0.3s"}
    assert 0.3 <= elapsed < 2.0  # one shared deadline, not one per party in turn
