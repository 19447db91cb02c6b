"""One VerFedGNN round over HTTP: configure → fan out → collect (results, failures) → aggregate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from services.coordinator.client import PartyClient
from services.errors import DomainError
from services.protocol.arrays import decode_array, encode_array
from services.protocol.federation import pack_tree
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.messages import decode_upload
from services.verfedgnn.types import GradientUpload, RoundMetrics

T = TypeVar("T")


def fan_out(
    pool: ThreadPoolExecutor, clients: Mapping[str, PartyClient], call: Callable[[PartyClient], T],
) -> tuple[dict[str, T], dict[str, str]]:
    """Run `call` against every client in parallel; failures are data (party → reason), never raised."""
    futures = {pid: pool.submit(call, c) for pid, c in sorted(clients.items())}
    results: dict[str, T] = {}
    failures: dict[str, str] = {}
    for pid, fut in futures.items():
        try:
            results[pid] = fut.result()
        except DomainError as exc:
            failures[pid] = f"{exc.code}: {exc.detail}"
        except Exception as exc:  # noqa: BLE001 - a party's bad answer must not stop the round
            failures[pid] = f"{type(exc).__name__}: {exc}"
    return results, failures


@dataclass
class RoundOutcome:
    """What a round attempt produced: metrics when it completed, and who failed at which step."""

    metrics: RoundMetrics | None
    participants: list[str]
    failures: dict[str, str] = field(default_factory=dict)


def run_round(
    *, coord: CoordinatorTrainer, clients: Mapping[str, PartyClient], pool: ThreadPoolExecutor, run_id: str,
    round_index: int, attempt: int, min_parties: int,
) -> RoundOutcome:
    """Drive one round; parties that fail are left out and the partial-participation estimator covers them."""
    chosen = coord.select_participants(round_index=round_index, available=list(clients))
    base = f"/v1/federation/runs/{run_id}/rounds/{round_index}"
    q = f"?attempt={attempt}"
    failures: dict[str, str] = {}
    alive = {p: clients[p] for p in chosen}

    def keep(results: Mapping[str, object], failed: dict[str, str], step: str) -> bool:
        failures.update({p: f"{step}: {why}" for p, why in failed.items()})
        for p in list(alive):
            if p not in results:
                alive.pop(p)
        return len(alive) >= min_parties

    public = pack_tree(coord.public_params())
    res, failed = fan_out(pool, alive, lambda c: c.post_bytes(f"{base}/begin{q}", public))
    if not keep(res, failed, "begin"):
        return RoundOutcome(None, sorted(alive), failures)
    for layer in range(coord.public.config.n_layers):
        def projection(c: PartyClient, k: int = layer) -> np.ndarray:
            return decode_array(c.post_bytes(f"{base}/layers/{k}/projection{q}"), dtype=np.float32)

        got, failed = fan_out(pool, alive, projection)
        if not keep(got, failed, f"projection[{layer}]"):
            return RoundOutcome(None, sorted(alive), failures)
        relayed = coord.relay(layer=layer, projections=dict(sorted(got.items())))
        def others(c: PartyClient, k: int = layer, down: dict[str, np.ndarray] = relayed) -> bytes:
            return c.post_bytes(f"{base}/layers/{k}/others{q}", encode_array(down[c.party_id]))

        res, failed = fan_out(pool, alive, others)
        if not keep(res, failed, f"others[{layer}]"):
            return RoundOutcome(None, sorted(alive), failures)
    uploads, failed = fan_out(pool, alive, lambda c: decode_upload(
        c.post_bytes(f"{base}/finish{q}"), party_id=c.party_id, round_index=round_index))
    if not keep(uploads, failed, "finish"):
        return RoundOutcome(None, sorted(alive), failures)
    good: dict[str, GradientUpload] = dict(sorted(uploads.items()))
    return RoundOutcome(coord.aggregate_and_step(uploads=good), sorted(good), failures)
