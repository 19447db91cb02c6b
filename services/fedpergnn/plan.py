"""FedPerGNN as the runtime sees it (the baseline over HTTP): typed config, party side, engine.

The party's pseudonym key comes from its own secret (never the coordinator's), the relay is played
by the coordinator (FedPerGNN's third party; its leak is what the baseline shows), and the LDP
uploads are summed as sent: FedPerGNN's design has no secure aggregation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from typing import Any, Literal

import numpy as np

from services.errors import ProtocolError
from services.federation.aggregation import Aggregation, PartyAggregation
from services.federation.links import Handler, Link
from services.crypto.interaction_dp import RunGuarantee
from services.federation.plan import RatingTable, RoundOutcome, Seeds, StoppingRule
from services.fedpergnn.config import DEFAULT_PRESET, FedPerGNNConfig, FedPerGNNRunConfig
from services.fedpergnn.party import FedPerGNNParty
from services.fedpergnn.rounds import FedPerGNNHandler, play_round, relay_for
from services.verfedgnn.config import run_config
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.plan import ENGINE_ONLY, load_party_data
from services.verfedgnn.plan import PLAN as VERFEDGNN
from services.verfedgnn.presets import PRESETS, protocol_preset
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import PartyData


def pseudonym_key(local_seed: int) -> bytes:
    """The party's item-pseudonym key, from its own randomness."""
    return hashlib.sha256(b"fedrec-fedpergnn-key|" + local_seed.to_bytes(8, "big")).digest()


class FedPerGNNPartySide:
    """One FedPerGNN run at a party."""

    def __init__(self, party: FedPerGNNParty, aggregation: PartyAggregation) -> None:
        self.party, self._handler = party, FedPerGNNHandler(party, aggregation)

    @property
    def handler(self) -> Handler:
        """What answers the round's steps."""
        return self._handler

    def checkpoint(self) -> bytes:
        """The trainer's checkpoint."""
        return dump_state(self.party.state_dict())

    def restore(self, state: bytes) -> None:
        """Restore the trainer."""
        self.party.load_state_dict(load_state(state))

    def serving_model(self) -> dict[str, np.ndarray]:
        """The trainer's serving arrays."""
        return self.party.serving_model()


class FedPerGNNEngine:
    """The coordinator side: public parameters, the relay, one `play_round` per attempt."""

    def __init__(self, config: FedPerGNNConfig, trainer: CoordinatorTrainer) -> None:
        self.config, self.trainer, self.relay = config, trainer, relay_for(config.train.seed)

    def play(self, *, links: Mapping[str, Link], round_index: int, attempt: int, min_parties: int,
             pool: Executor | None, aggregation: Aggregation) -> RoundOutcome:
        """One round attempt."""
        return play_round(coord=self.trainer, relay=self.relay, config=self.config, links=links,
                          round_index=round_index, attempt=attempt, min_parties=min_parties, pool=pool,
                          aggregation=aggregation)

    def checkpoint(self) -> bytes:
        """Checkpoint of the public model."""
        return dump_state(self.trainer.state_dict())

    def restore(self, state: bytes) -> None:
        """Restore the public model."""
        self.trainer.load_state_dict(load_state(state))


class FedPerGNNPlan:
    """The registry's entry for FedPerGNN."""

    name = "fedpergnn"
    run_model = FedPerGNNRunConfig
    default_preset = DEFAULT_PRESET
    presets = PRESETS

    def resolve(self, *, explicit: Mapping[str, Any], preset: str) -> tuple[int, dict[str, Any]]:
        """FedPerGNN's own settings as set; the preset's values then the caller's under `train` (the plan's
        `config` applies the coordinator's run defaults there)."""
        rest = dict(explicit)
        gnn = dict(rest.pop("train", {}))
        values = protocol_preset(preset, model=gnn.get("model", "gcn"), protocol=self.name)
        rounds = int(values.pop("rounds"))
        return rounds, {"protocol": self.name, **rest, "train": {**values, **gnn}}

    def stored_settings(self, config: FedPerGNNConfig) -> dict[str, Any]:
        """FedPerGNN's settings, and the GNN's but the run's own (seed, rounds) under `train`."""
        return {"protocol": self.name, **config.model_dump(exclude={"train"}),
                "train": config.train.model_dump(exclude=ENGINE_ONLY)}

    def config(self, raw: Mapping[str, Any], *, seed: int, rounds: int) -> FedPerGNNConfig:
        """FedPerGNN's settings with the shared GNN settings under `train` (the run's seed and rounds win)."""
        rest = {k: v for k, v in raw.items() if k not in ("protocol", "train")}
        return FedPerGNNConfig(train=run_config(dict(raw.get("train") or {}), seed=seed, rounds=rounds), **rest)

    def load(self, *, config: Any, party_id: str, table: RatingTable, user_order: Sequence[str],
             item_order: Sequence[str], total_items: int, rating_range: tuple[float, float],
             local_seed: int, feedback: Literal["explicit", "implicit"] = "explicit") -> PartyData:
        """The party's training data (the shared GNN's loading)."""
        return load_party_data(config=config.train, party_id=party_id, table=table, user_order=user_order,
                               item_order=item_order, total_items=total_items, rating_range=rating_range,
                               local_seed=local_seed, feedback=feedback)

    def announce(self, data: PartyData) -> tuple[int, float]:
        """Training ratings and their sum (an implicit party announces none)."""
        return data.mean_sums()

    def party(self, *, config: Any, data: PartyData, seeds: Seeds, item_counts: Mapping[str, int],
              aggregation: PartyAggregation) -> FedPerGNNPartySide:
        """The FedPerGNN party with its own pseudonym key."""
        party = FedPerGNNParty(config=config, data=data, seed=config.train.seed, key=pseudonym_key(seeds.local_seed))
        return FedPerGNNPartySide(party, aggregation)

    def engine(self, *, config: Any, n_users: int, item_counts: Mapping[str, int],
               global_mean: float) -> FedPerGNNEngine:
        """The coordinator's trainer and relay."""
        return FedPerGNNEngine(config, CoordinatorTrainer(config=config.train, n_users=n_users,
                                                          item_counts=item_counts, global_mean=global_mean))

    def with_features(self, data: Any, *, config: Any, user_order: Sequence[str], item_order: Sequence[str],
                      users: Iterable[Any], items: Iterable[Any]) -> Any:
        """FedPerGNN's model takes no attributes: `data` unchanged."""
        return data

    def fit_rating(self, data: Any, *, base: Callable[[np.ndarray, np.ndarray], np.ndarray], n_users: int,
                   n_items: int, seed: int) -> dict[str, np.ndarray] | None:
        """FedPerGNN serves its federated predictions alone (no rating component)."""
        return None

    def valid_ratings(self, data: Any, *, n_users: int,
                      n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """None: FedPerGNN's release gate reads the run's pooled validation figures."""
        return None

    def fit_local(self, data: Any, *, fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> None:
        """FedPerGNN serves its federated scores alone (no local ranking yet)."""
        return None

    def secure_by_default(self, config: Any) -> bool:
        """FedPerGNN's uploads are LDP-noised and summed as sent (its design)."""
        return False

    def seed(self, config: FedPerGNNConfig) -> int:
        """The run seed (kept with the GNN's settings)."""
        return config.train.seed

    def stopping(self, config: FedPerGNNConfig) -> StoppingRule:
        """The GNN settings' patience (under `train`), read as VerFedGNN reads its own."""
        return VERFEDGNN.stopping(config.train)

    def guarantee(self, config: FedPerGNNConfig) -> RunGuarantee:
        """The shared training settings' whole-run guarantee."""
        return config.guarantee()

    def privacy_record(self, config: FedPerGNNConfig) -> dict[str, object]:
        """FedPerGNN's mechanisms and their parameters."""
        return config.privacy_record()

    def budget(self, config: FedPerGNNConfig) -> tuple[float, float] | None:
        """The (ε, δ) budget of the GNN's settings (under `train`), if set."""
        return VERFEDGNN.budget(config.train)

    def warm_settings(self, *, previous: Mapping[str, Any], settings: Mapping[str, Any],
                      explicit: AbstractSet[str]) -> dict[str, Any]:
        """Refused: a FedPerGNN party's user state (pseudonymised neighbourhoods, local user rows) is per run."""
        raise ValueError("FedPerGNN runs cannot warm start (only VerFedGNN runs can); create the run without warm_start")

    def warm_party(self, side: Any, *, state: bytes, item_rows: np.ndarray) -> None:
        """Refused (see warm_settings)."""
        raise ProtocolError("FedPerGNN runs cannot warm start")

    def warm_engine(self, engine: Any, *, state: bytes, user_rows: np.ndarray) -> None:
        """Refused (see warm_settings)."""
        raise ProtocolError("FedPerGNN runs cannot warm start")


PLAN = FedPerGNNPlan()
