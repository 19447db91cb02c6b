"""Any registered protocol in one process, built as the HTTP parties and the coordinator build it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.errors import ProtocolError
from services.federation.aggregation import aggregation, party_aggregation, secure_run
from services.federation.links import InProcessLink, Link
from services.federation.plan import Engine, PartySide, ProtocolPlan, Seeds


class InProcessRun:
    """A protocol's engine and party sides over in-process links (the reference an HTTP run must equal)."""

    def __init__(self, *, plan: ProtocolPlan, config: Any, datas: Mapping[str, Any], seeds: Mapping[str, Seeds],
                 secagg: Mapping[str, Any]) -> None:
        counts = {p: int(d.n_items) for p, d in sorted(datas.items())}
        announced = {p: plan.announce(d) for p, d in datas.items()}
        n = sum(c for c, _ in announced.values())
        mean = sum(s for _, s in announced.values()) / max(1, n)
        secure = secure_run(plan.secure_by_default(config), datas)
        self.sides: dict[str, PartySide] = {
            p: plan.party(config=config, data=d, seeds=seeds[p], item_counts=counts,
                          aggregation=party_aggregation(secure=secure, secagg=secagg[p], parties=sorted(datas)))
            for p, d in sorted(datas.items())}
        any_data = next(iter(datas.values()))
        self.engine: Engine = plan.engine(config=config, n_users=int(any_data.n_users), item_counts=counts,
                                          global_mean=mean)
        self.aggregation = aggregation(secure=secure)
        self.links: dict[str, Link] = {p: InProcessLink(p, s.handler) for p, s in self.sides.items()}

    def run_round(self, round_index: int) -> Any:
        """One round with every party; a party's failure fails the round (ProtocolError)."""
        out = self.engine.play(links=self.links, round_index=round_index, attempt=0, min_parties=len(self.links),
                               pool=None, aggregation=self.aggregation)
        if out.metrics is None:
            raise ProtocolError(f"round {round_index} failed: {out.failures}")
        return out.metrics
