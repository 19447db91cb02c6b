"""What a party's publish answers under whole-run DP (issue 39, Q4): no validation figures, and why.

The run's ε is read through its protocol's plan (`RunContract.dp_epsilon`), so FedPerGNN's nested
`train.dp_epsilon` counts as VerFedGNN's top-level one does. Under DP the value report's rows and the
served model's validation (error sum, count) stay at the party; without DP they are answered.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from models.blend import SliceFigures
from services.federation import registry
from services.federation.plan import RunContract
from services.party.federation import FederationService, _Run
from services.party.serving import ServingModel

N, M = 4, 5


def _contract(protocol: str, raw: dict[str, Any]) -> RunContract:
    plan = registry.plan(protocol)
    return RunContract(plan, plan.config(raw, seed=0, rounds=1))


@pytest.mark.parametrize(("protocol", "raw", "dp"), [
    ("verfedgnn", {}, False), ("verfedgnn", {"dp_epsilon": 8}, True),
    ("fedpergnn", {}, False), ("fedpergnn", {"train": {"dp_epsilon": 8}}, True)])
def test_the_runs_epsilon_is_read_through_its_plan(protocol: str, raw: dict[str, Any], dp: bool) -> None:
    epsilon = _contract(protocol, raw).dp_epsilon()
    assert (epsilon is not None) == dp
    if dp:
        assert epsilon == pytest.approx(8.0, abs=1e-3)


class _Local:
    """A fitted local ranking with one reportable slice and one too small to report."""

    figures: ClassVar[list[SliceFigures]] = [SliceFigures("all", 12, 0.2, 0.25, 0.3), SliceFigures("aligned_cold", 3, 0.1, 0.1, 0.1)]

    def to_tree(self) -> dict[str, Any]:
        return {"weights": np.zeros(1)}


class _Plan:
    """The real protocol's guarantee; a fixed local ranking and validation ratings instead of training."""

    def __init__(self, protocol: str) -> None:
        self.real = registry.plan(protocol)

    def guarantee(self, config: Any) -> Any:
        return self.real.guarantee(config)

    def fit_local(self, data: Any, *, fed_rows: Any, seed: int) -> _Local:
        return _Local()

    def valid_ratings(self, data: Any, *, n_users: int, n_items: int) -> tuple[np.ndarray, ...]:
        return np.array([0, 1, 2]), np.array([0, 3, 4]), np.array([4.0, 2.0, 5.0])


def _model() -> ServingModel:
    rng = np.random.default_rng(0)
    f32 = np.float32
    return ServingModel(run_id="r", round_index=0, user_ids=np.array([f"u{i}" for i in range(N)]),
                        item_ids=np.array([f"i{j}" for j in range(M)]), h_u=rng.normal(size=(N, 3)).astype(f32),
                        h_v=rng.normal(size=(M, 3)).astype(f32), user_bias=np.zeros(N, f32),
                        item_bias=np.zeros(M, f32), global_bias=3.0, rating_min=1.0, rating_max=5.0)


def _party(protocol: str, raw: dict[str, Any]) -> tuple[FederationService, _Run]:
    service = FederationService(sessions=None, party_id="p0", rating_min=1.0, rating_max=5.0)  # type: ignore[arg-type]
    contract = _contract(protocol, raw)
    run = _Run("r", _Plan(protocol), contract.config, 0, [f"u{i}" for i in range(N)],  # type: ignore[arg-type]
               [f"i{j}" for j in range(M)], data=object())
    fitted, value = service._with_local(run, _model())
    run.published, run.published_value = {0: fitted}, value
    service._runs["r"] = run
    return service, run


@pytest.mark.parametrize(("protocol", "raw"), [("verfedgnn", {"dp_epsilon": 8}),
                                               ("fedpergnn", {"train": {"dp_epsilon": 8}})])
def test_under_dp_publish_withholds_the_validation_figures(protocol: str, raw: dict[str, Any]) -> None:
    service, run = _party(protocol, raw)
    assert run.published_value == []
    assert run.published[0].local is not None, "the party still serves its local ranking"
    assert service.served_valid(run_id="r", round_index=0) is None
    reason = service.value_withheld(run_id="r")
    assert reason is not None and "dp_epsilon" in reason and "outside" in reason


@pytest.mark.parametrize("protocol", ["verfedgnn", "fedpergnn"])
def test_without_dp_publish_answers_them(protocol: str) -> None:
    service, run = _party(protocol, {})
    assert run.published_value == [{"slice": "all", "users": 12, "local_ndcg10": 0.2, "federated_ndcg10": 0.25,
                                     "served_ndcg10": 0.3}]
    sums = service.served_valid(run_id="r", round_index=0)
    assert sums is not None and sums[1] == 3 and sums[0] >= 0
    assert service.value_withheld(run_id="r") is None
