"""Baseline protocols run by the experiment harness: FedPerGNN-style graph expansion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.evaluation.harness import RoundCallback, RunResult, train_rounds
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.rounds import FedPerGNNFederation
from services.verfedgnn.types import PartyData, party_number

_KEY_TAG = 7_2024


def experiment_keys(parties: Sequence[PartyData], *, seed: int) -> dict[str, bytes]:
    """Pseudonym keys derived from the seed, so experiments are reproducible (a real party draws its own)."""
    return {p.party_id: np.random.default_rng([seed, party_number(p.party_id), _KEY_TAG]).bytes(32) for p in parties}


def fedpergnn_federation(parties: Sequence[PartyData], *, config: FedPerGNNConfig,
                         global_mean: float) -> FedPerGNNFederation:
    """An in-process FedPerGNN federation over the parties, with seeded pseudonym keys."""
    return FedPerGNNFederation(config=config, parties={p.party_id: p for p in parties}, global_mean=global_mean,
                               keys=experiment_keys(parties, seed=config.train.seed))


def train_fedpergnn(parties: Sequence[PartyData], *, config: FedPerGNNConfig, global_mean: float,
                    on_round: RoundCallback | None = None) -> RunResult:
    """Train FedPerGNN with early stopping on the validation RMSE (as the harness trains VerFedGNN)."""
    fed = fedpergnn_federation(parties, config=config, global_mean=global_mean)
    return train_rounds(fed.run_round, config=config.train, protocol="fedpergnn", on_round=on_round)
