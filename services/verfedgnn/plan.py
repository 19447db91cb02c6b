"""VerFedGNN as the runtime sees it: typed config, party side (a PartyTrainer behind its handler), engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from typing import Any, Literal

import numpy as np

from models.blend import LocalRanking
from services.errors import PolicyRefused
from services.federation.aggregation import Aggregation, PartyAggregation
from services.federation.links import Handler, Link
from services.crypto.interaction_dp import RunGuarantee
from services.federation.plan import RatingTable, RoundOutcome, Seeds, StoppingRule
from services.federation.validation import carve_validation
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig, VerFedGNNRunConfig, model_config, run_config
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.distributed import Cluster, DistributedPartyTrainer
from services.verfedgnn.features import attach_features
from services.verfedgnn.local import fit_local
from services.verfedgnn.rating_component import ComponentConfig, fit_component
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.presets import DEFAULT_PRESET, PRESETS, protocol_preset
from services.verfedgnn.private_data import training_data
from services.verfedgnn.rounds import VerFedGNNParty, run_round
from services.verfedgnn.secure import seeded_trainer
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import SPLIT_CODES, PartyData, build_party_data


class VerFedGNNPartySide:
    """One run at a party: the trainer and the handler that answers the round's steps."""

    def __init__(self, trainer: PartyTrainer | DistributedPartyTrainer, handler: VerFedGNNParty) -> None:
        self.trainer, self._handler = trainer, handler

    @property
    def handler(self) -> Handler:
        """What answers the round's steps."""
        return self._handler

    def checkpoint(self) -> bytes:
        """The trainer's checkpoint."""
        return dump_state(self.trainer.state_dict())

    def restore(self, state: bytes) -> None:
        """Restore the trainer."""
        self.trainer.load_state_dict(load_state(state))

    def serving_model(self) -> dict[str, np.ndarray]:
        """The trainer's serving arrays."""
        return self.trainer.serving_model()

    def close(self) -> None:
        """Stop the trainer's distributed workers, if it has any."""
        if isinstance(self.trainer, DistributedPartyTrainer):
            self.trainer.close()


class VerFedGNNEngine:
    """The coordinator side: public parameters and their optimizer, one `run_round` per attempt."""

    def __init__(self, trainer: CoordinatorTrainer) -> None:
        self.trainer = trainer
        self.config = trainer.config

    def play(self, *, links: Mapping[str, Link], round_index: int, attempt: int, min_parties: int,
             pool: Executor | None, aggregation: Aggregation) -> RoundOutcome:
        """One round attempt."""
        return run_round(coord=self.trainer, links=links, round_index=round_index, attempt=attempt,
                         min_parties=min_parties, pool=pool, aggregation=aggregation)

    def checkpoint(self) -> bytes:
        """Checkpoint of the public model."""
        return dump_state(self.trainer.state_dict())

    def restore(self, state: bytes) -> None:
        """Restore the public model."""
        self.trainer.load_state_dict(load_state(state))


ENGINE_ONLY = {"seed", "rounds", "projection_seed"}  # the run's own, or agreed among the parties at set-up
def check_feedback(config: TrainConfig, feedback: str) -> None:
    """Refuse (PolicyRefused) a run an implicit party cannot train: its only objective is the ranking loss."""
    if feedback == "implicit" and config.rank_weight <= 0:
        raise PolicyRefused("this party records implicit feedback (PARTY_FEEDBACK=implicit) and trains the ranking "
                            "objective only; the run's rank_weight is 0 (use the tuned-ranking preset or set "
                            "rank_weight > 0)", extra={"field": "config.rank_weight"})


def load_party_data(*, config: TrainConfig, party_id: str, table: RatingTable, user_order: Sequence[str],
                    item_order: Sequence[str], total_items: int, rating_range: tuple[float, float],
                    local_seed: int, feedback: Literal["explicit", "implicit"] = "explicit",
                    include_private: bool = False) -> PartyData:
    """PartyData over the aligned users (and, with `include_private`, the party's other users as private
    users), a validation carve if none is labelled, randomized once when DP is on."""
    check_feedback(config, feedback)
    codes = carve_validation(table, fraction=config.valid_fraction, seed=config.seed, party_id=party_id,
                             aligned=user_order)
    data = build_party_data(party_id=party_id, user_order=list(user_order), item_order=list(item_order),
                            users=[str(u) for u in table.users.tolist()], items=[str(i) for i in table.items.tolist()],
                            ratings=table.ratings, codes=codes, total_items=total_items,
                            rating_min=rating_range[0], rating_max=rating_range[1], feedback=feedback,
                            include_private=include_private)
    return training_data(data, config=config, local_seed=local_seed)


class VerFedGNNPlan:
    """The registry's entry for VerFedGNN."""

    name = "verfedgnn"
    run_model = VerFedGNNRunConfig
    default_preset = DEFAULT_PRESET
    presets = PRESETS

    def resolve(self, *, explicit: Mapping[str, Any], preset: str) -> tuple[int, dict[str, Any]]:
        """The preset's values for the run's model, the coordinator's RUN_DEFAULTS, then the caller's."""
        values = protocol_preset(preset, model=explicit.get("model", "gcn"), protocol=self.name)
        rounds = int(values.pop("rounds"))
        return rounds, {"protocol": self.name, **RUN_DEFAULTS, **values, **explicit}

    def stored_settings(self, config: TrainConfig) -> dict[str, Any]:
        """Every engine setting but the run's own (seed, rounds) and the parties' (projection seed)."""
        return {"protocol": self.name, **config.model_dump(exclude=ENGINE_ONLY)}

    def config(self, raw: Mapping[str, Any], *, seed: int, rounds: int) -> TrainConfig:
        """The engine config (the run's seed and rounds win)."""
        return run_config({k: v for k, v in raw.items() if k != "protocol"}, seed=seed, rounds=rounds)

    def load(self, *, config: Any, party_id: str, table: RatingTable, user_order: Sequence[str],
             item_order: Sequence[str], total_items: int, rating_range: tuple[float, float],
             local_seed: int, feedback: Literal["explicit", "implicit"] = "explicit") -> PartyData:
        """The party's training data: the aligned users, and its other users as private users."""
        return load_party_data(config=config, party_id=party_id, table=table, user_order=user_order,
                               item_order=item_order, total_items=total_items, rating_range=rating_range,
                               local_seed=local_seed, feedback=feedback, include_private=True)

    def announce(self, data: PartyData) -> tuple[int, float]:
        """The aligned users' training ratings and their sum (for the global mean; an implicit party announces
        none)."""
        return data.mean_sums()

    def party(self, *, config: Any, data: PartyData, seeds: Seeds, item_counts: Mapping[str, int],
              aggregation: PartyAggregation) -> VerFedGNNPartySide:
        """A trainer whose Φ and private initialisation the coordinator cannot reproduce."""
        trainer = seeded_trainer(config=config, data=data, seeds=seeds)
        return VerFedGNNPartySide(trainer, VerFedGNNParty(trainer=trainer, item_counts=item_counts,
                                                          aggregation=aggregation))

    def distributed_party(self, *, config: Any, data: PartyData, seeds: Seeds, item_counts: Mapping[str, int],
                          aggregation: PartyAggregation, cluster: Cluster) -> VerFedGNNPartySide:
        """`party` with the run's users split over `cluster.workers` torch.distributed ranks (same messages)."""
        trainer = DistributedPartyTrainer(config=config.model_copy(update={"projection_seed": seeds.projection_seed}),
                                          data=data, seed=config.seed, local_seed=seeds.local_seed, cluster=cluster)
        return VerFedGNNPartySide(trainer, VerFedGNNParty(trainer=trainer, item_counts=item_counts,  # type: ignore[arg-type]
                                                          aggregation=aggregation))

    def engine(self, *, config: Any, n_users: int, item_counts: Mapping[str, int],
               global_mean: float) -> VerFedGNNEngine:
        """The coordinator's trainer."""
        return VerFedGNNEngine(CoordinatorTrainer(config=config, n_users=n_users, item_counts=item_counts,
                                                  global_mean=global_mean))

    def with_features(self, data: PartyData, *, config: TrainConfig, user_order: Sequence[str],
                      item_order: Sequence[str], users: Iterable[Any], items: Iterable[Any]) -> PartyData:
        """The party's attribute links attached (`services.verfedgnn.features`); a DP run leaves them out: DP covers
        interactions only, so the attributes stay out rather than be released unprotected."""
        if config.dp_epsilon is not None:
            return data
        return attach_features(data, user_order=user_order, item_order=item_order, users=users, items=items)

    def fit_rating(self, data: Any, *, base: Callable[[np.ndarray, np.ndarray], np.ndarray], n_users: int,
                   n_items: int, seed: int) -> dict[str, np.ndarray] | None:
        """I-AutoRec on the party's catalogue, combined per slice with `base` (`services.verfedgnn.rating_component`);
        None when the combination is not better than `base` on validation."""
        if (not isinstance(data, PartyData) or data.implicit or n_users != data.n_users + data.n_private
                or n_items != data.n_items):
            return None
        fitted = fit_component(data=data, base=base, config=ComponentConfig(), seed=seed)
        if fitted is None or not fitted.valid_rmse["combined"] <= fitted.valid_rmse["federated"]:
            return None
        return dict(fitted.tree)

    def valid_ratings(self, data: Any, *, n_users: int,
                      n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The validation split's triples (None: implicit feedback, or a model of another size)."""
        if (not isinstance(data, PartyData) or data.implicit or n_users != data.n_users + data.n_private
                or n_items != data.n_items):
            return None
        return data.valid.users, data.valid.items, data.valid.ratings

    def fit_local(self, data: Any, *, fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> LocalRanking:
        """The party's EASE blended with its federated scores (`services.verfedgnn.local`)."""
        return fit_local(data, fed_rows=fed_rows, seed=seed)

    def secure_by_default(self, config: Any) -> bool:
        """Masked sums unless the run turned secure aggregation off."""
        return bool(config.secure_aggregation)

    def seed(self, config: TrainConfig) -> int:
        """The run seed."""
        return config.seed

    def stopping(self, config: TrainConfig) -> StoppingRule:
        """`patience` on the validation RMSE, `rank_patience` (None: `patience`) on the validation NDCG@10."""
        return StoppingRule(patience=config.patience, rank_patience=config.rank_patience or config.patience)

    def guarantee(self, config: TrainConfig) -> RunGuarantee:
        """The randomized response's whole-run guarantee."""
        return config.guarantee()

    def privacy_record(self, config: TrainConfig) -> dict[str, object]:
        """The run's mechanisms and their parameters."""
        return config.privacy_record()

    def budget(self, config: TrainConfig) -> tuple[float, float] | None:
        """The run's (ε, δ) budget, if set."""
        return None if config.dp_budget_epsilon is None else (config.dp_budget_epsilon, config.dp_budget_delta)

    def warm_settings(self, *, previous: Mapping[str, Any], settings: Mapping[str, Any],
                      explicit: AbstractSet[str]) -> dict[str, Any]:
        """A warm run's settings: the previous run's architecture is required (ValueError naming what differs);
        the L2 warm-up is skipped unless the run sets it (warm embeddings have left the zero saddle it is for)."""
        if registry_name(previous) != self.name:
            raise ValueError(f"the active release was trained with {registry_name(previous)!r}, this run is {self.name!r}")
        old = model_config(run_config(_engine_only(previous), seed=0, rounds=1))
        new = model_config(run_config(_engine_only(settings), seed=0, rounds=1))
        differs = [f"{ARCHITECTURE[k]} {getattr(old, k)!r} → {getattr(new, k)!r}" for k in ARCHITECTURE
                   if getattr(old, k) != getattr(new, k)]
        if differs:
            raise ValueError("the architecture differs from the active release's: " + ", ".join(differs))
        return dict(settings) if "reg_warmup" in explicit else {**settings, "reg_warmup": 0}

    def warm_party(self, side: Any, *, state: bytes, item_rows: np.ndarray) -> None:
        """Load the previous run's private item parameters into a new party side, mapped by item."""
        side.trainer.load_warm(load_state(state), item_rows=item_rows)

    def warm_engine(self, engine: Any, *, state: bytes, user_rows: np.ndarray) -> None:
        """Load the previous run's public parameters into a new engine, mapped by user row."""
        engine.trainer.load_warm(load_state(state), user_rows=user_rows)


# What a warm run must share with the release's run (model field → the run setting that sets it); the
# initialisation settings (init_std, gate_init) only shape fresh rows, so they may differ.
ARCHITECTURE = {"kind": "model", "dim": "dim", "layers": "layers", "activation": "activation", "use_bias": "use_bias",
                "rating_levels": "rating_levels", "transform": "transform", "rank_dims": "rank_dims",
                "rank_bias": "rank_weight > 0"}


def registry_name(settings: Mapping[str, Any]) -> str:
    """The protocol a stored run's settings name."""
    return str(settings.get("protocol") or "verfedgnn")


def _engine_only(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in ("protocol", "seed", "rounds", "projection_seed")}


PLAN = VerFedGNNPlan()
