"""The coordinator's own Prometheus metrics: rounds, their duration, bytes per party per round, privacy spent."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.coordinator.runs import RoundRecord
from services.federation.plan import RunContract

ROUND_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
BYTE_BUCKETS = (1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9)


class CoordinatorMetrics:
    """Metrics the run manager feeds after every completed round (`RunManager(on_round=...)`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter("fedrec_rounds_completed", "Training rounds completed", ["run_id"], registry=registry)
        self.duration = Histogram("fedrec_round_duration_seconds", "Wall time of one completed round",
                                  buckets=ROUND_BUCKETS, registry=registry)
        self.party_bytes = Histogram("fedrec_round_party_bytes", "Request/response body bytes exchanged with one "
                                     "party in one round (direction: sent to / received from it)",
                                     ["party", "direction"], buckets=BYTE_BUCKETS, registry=registry)
        self.privacy = Gauge("fedrec_run_privacy_spent", "Privacy spent by a run's gradient uploads so far: per "
                             "round ternary quantization is (0, grad_scale/r)-DP, composed over rounds (basic "
                             "composition); without quantization epsilon is unbounded",
                             ["run_id", "parameter"], registry=registry)
        self.dp = Gauge("fedrec_run_dp_spent", "Whole-run differential privacy a run has spent (the run record's "
                        "guarantee for one user-item interaction at one party): parameter epsilon (+Inf without "
                        "DP) at parameter delta", ["run_id", "parameter"], registry=registry)

    def round_completed(self, run_id: str, record: RoundRecord, config: RunContract) -> None:
        """Count the round, observe its duration and traffic, update the run's privacy spent."""
        self.rounds.labels(run_id).inc()
        self.duration.observe(record.seconds)
        for party, n in record.bytes_sent.items():
            self.party_bytes.labels(party, "sent").observe(n)
        for party, n in record.bytes_received.items():
            self.party_bytes.labels(party, "received").observe(n)
        quantization = config.privacy_record().get("quantization") or {}  # FedPerGNN has none
        per_round = quantization.get("dp_delta_per_round")  # type: ignore[attr-defined]
        rounds = record.round_index + 1
        self.privacy.labels(run_id, "epsilon").set(0.0 if per_round is not None else float("inf"))
        self.privacy.labels(run_id, "delta").set(min(1.0, rounds * per_round) if per_round is not None else 1.0)
        # A round has completed, so every party has released its randomized matrix: the whole ε is spent.
        guarantee = config.guarantee()
        self.dp.labels(run_id, "epsilon").set(guarantee.epsilon)
        self.dp.labels(run_id, "delta").set(guarantee.delta)
