"""Training-round contract shared by party and coordinator: config, party data, uploads, metrics.

Everything here is numpy or pydantic so the same objects travel in-process or over HTTP.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

SPLITS = ("train", "valid", "test")


class TrainConfig(BaseModel):
    """Hyper-parameters and privacy switches of one training run (identical at every participant)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Literal["gcn", "gat", "ggnn", "mf"] = "gcn"
    dim: int = Field(6, ge=1, le=1024, description="embedding size D")
    layers: int = Field(2, ge=0, le=8, description="propagation layers K (0 for mf)")
    activation: Literal["sigmoid", "tanh", "identity", "relu"] = "sigmoid"
    use_bias: bool = True
    gate_init: float = Field(1.0, ge=0.0, le=1.0, description="initial weight of other parties' aggregates")
    init_std: float = Field(0.1, gt=0.0, le=1.0)
    rating_levels: int = Field(0, ge=0, le=64, description="0: plain edges; L > 0: learnable weight per rating level")
    transform: bool = Field(True, description="GCN/GAT layers apply W^k; False: LightGCN-style (W^k = I)")
    optimizer: Literal["adagrad", "adam"] = "adagrad"
    lr: float = Field(0.05, gt=0.0, description="learning rate of the public parameters (coordinator)")
    lr_private: float | None = Field(None, gt=0.0, description="learning rate of item parameters (default lr)")
    reg: float = Field(0.0, ge=0.0, description="L2 per training rating on the final h_u and h_v")
    weight_decay: float = Field(0.0, ge=0.0, description="uniform L2 on e^0: items at the party, users at the coordinator")
    reg_bias: float = Field(0.0, ge=0.0, description="L2 per training rating on user and item biases")
    reg_warmup: int = Field(0, ge=0, description="rounds over which reg and weight_decay ramp up linearly from 0 "
                            "(lets embeddings leave the zero saddle before strong L2 applies)")
    rounds: int = Field(200, ge=1)
    patience: int = Field(30, ge=1, description="early stopping: rounds without validation improvement")
    thd: float = Field(4.0, description="only ratings >= thd become graph edges")
    clip_bound: float = Field(0.5, gt=0.0)
    grad_scale: float = Field(1.0, gt=0.0, description="public gradients are multiplied by this before clipping "
                              "and quantization, and divided by it after aggregation")
    r: float = Field(3.0, gt=0.0, description="ternary quantization level (needs r >= clip_bound)")
    q_ratio: float = Field(0.2, gt=0.0, le=0.5, description="q = round(q_ratio · N)")
    projection_kind: Literal["gaussian", "sparse"] = "gaussian"
    nnz_per_column: int = Field(4, ge=1)
    alpha: float = Field(1.0, gt=0.0, le=1.0, description="participation rate")
    use_projection: bool = True
    use_quantization: bool = True
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.use_quantization and self.r < self.clip_bound:
            raise ValueError(f"r={self.r} must be >= clip_bound={self.clip_bound} (r >= ||g||_inf)")
        return self

    def privacy_record(self) -> dict[str, object]:
        """The privacy mechanisms of this run and their effective parameters (defaults included)."""
        return {
            "projection": {"enabled": self.use_projection, "kind": self.projection_kind, "q_ratio": self.q_ratio,
                           "nnz_per_column": self.nnz_per_column if self.projection_kind == "sparse" else None},
            "quantization": {"enabled": self.use_quantization, "clip_bound": self.clip_bound, "r": self.r,
                             "grad_scale": self.grad_scale,
                             # (0, 1/r)-DP per unit of the quantized vector; scaling by s first gives s/r per raw unit
                             "dp_delta_per_round": (self.grad_scale / self.r) if self.use_quantization else None},
            "participation": {"alpha": self.alpha},
        }

    def reg_factor(self, round_index: int) -> float:
        """Multiplier of the L2 terms in round `round_index` (linear warm-up, then 1)."""
        return 1.0 if self.reg_warmup <= 0 else min(1.0, (round_index + 1) / self.reg_warmup)

    @property
    def private_lr(self) -> float:
        """Learning rate of the party's item parameters."""
        return self.lr_private if self.lr_private is not None else self.lr


@dataclass(frozen=True)
class RatingTriples:
    """Parallel arrays of (user index, party-local item index, rating)."""

    users: np.ndarray  # int64
    items: np.ndarray  # int64
    ratings: np.ndarray  # float32

    def __len__(self) -> int:
        return int(self.ratings.shape[0])

    @staticmethod
    def empty() -> RatingTriples:
        """No ratings."""
        return RatingTriples(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


@dataclass(frozen=True)
class PartyData:
    """What one party holds: its items' ratings by split; users are the aligned common users."""

    party_id: str
    n_users: int
    n_items: int
    total_items: int  # Σ_i M_i over all parties: public, announced once
    train: RatingTriples
    valid: RatingTriples = field(default_factory=RatingTriples.empty)
    test: RatingTriples = field(default_factory=RatingTriples.empty)
    rating_min: float = 1.0  # predictions are clamped to the rating range when scored
    rating_max: float = 5.0

    def split(self, name: str) -> RatingTriples:
        """Ratings of split `name` (train/valid/test)."""
        return {"train": self.train, "valid": self.valid, "test": self.test}[name]


@dataclass(frozen=True)
class QuantizedArray:
    """Sparse ternary upload of one gradient: value r·sign at `indices` (flat), zero elsewhere."""

    shape: tuple[int, ...]
    r: float
    indices: np.ndarray  # int64, flat positions
    signs: np.ndarray  # int8, ±1

    def nbytes(self) -> int:
        """Bytes on the wire (indices + signs)."""
        return int(self.indices.nbytes + self.signs.nbytes)


@dataclass(frozen=True)
class MetricSums:
    """Sums a party reports for one split: squared and absolute errors and the count."""

    sse: float = 0.0
    sae: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class GradientUpload:
    """A party's round result: public-parameter gradients (quantized or dense) and metric sums."""

    party_id: str
    round_index: int
    loss: float
    quantized: dict[str, QuantizedArray] = field(default_factory=dict)
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, MetricSums] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Payload size of the gradients."""
        return sum(q.nbytes() for q in self.quantized.values()) + sum(int(a.nbytes) for a in self.dense.values())


@dataclass(frozen=True)
class RoundMetrics:
    """Coordinator-side summary of one round (metrics are of the model at the start of the round)."""

    round_index: int
    participants: list[str]
    loss: float
    rmse: dict[str, float]  # split -> RMSE over participating parties
    mae: dict[str, float]
    per_party: dict[str, dict[str, float]]  # party -> {"train_rmse", "valid_rmse", "test_rmse", "test_mae", ...}
    upload_bytes: int
    upload_nonzeros: int


def party_number(party_id: str) -> int:
    """Stable integer of a party id (for seeding; independent of dict order and process)."""
    return zlib.crc32(party_id.encode("utf-8"))


def rmse_mae(sums: list[MetricSums]) -> tuple[float, float]:
    """RMSE and MAE from summed errors (nan when there is nothing to score)."""
    n = sum(s.count for s in sums)
    if n == 0:
        return float("nan"), float("nan")
    return float(np.sqrt(sum(s.sse for s in sums) / n)), float(sum(s.sae for s in sums) / n)
