"""VerFedGNN run configuration and what every participant derives from it: model, optimizer, projection Φ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.vertical import VerFedGNNConfig
from services.crypto import projection as proj
from services.crypto.interaction_dp import RunGuarantee, run_guarantee
from services.crypto.projection import ProjectionSpec, projection_spec
from services.verfedgnn.presets import DEFAULT_PRESET, preset_values

RATING_BUCKETS = 6  # absent + 5 levels (1..5); p is set per party from its own scale, ε is the same


class VerFedGNNSettings(BaseModel):
    """Every setting of a VerFedGNN run except its seed and length (identical at every participant)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: Literal["gcn", "gat", "ggnn", "mf"] = Field("gcn", description="graph layer (mf: no propagation)")
    dim: int = Field(6, ge=1, le=1024, description="embedding size D")
    layers: int = Field(2, ge=0, le=8, description="propagation layers K (0 for mf)")
    activation: Literal["sigmoid", "tanh", "identity", "relu"] = Field(
        "sigmoid", description="non-linearity after each propagation layer")
    use_bias: bool = Field(True, description="rating = μ + b_u + b_v + h_u·h_v; False: h_u·h_v alone")
    gate_init: float = Field(1.0, ge=0.0, le=1.0, description="initial weight of other parties' aggregates")
    init_std: float = Field(0.1, gt=0.0, le=1.0, description="standard deviation of the initial embeddings")
    rating_levels: int = Field(0, ge=0, le=64, description="0: plain edges; L > 0: learnable weight per rating level")
    transform: bool = Field(True, description="GCN/GAT layers apply W^k; False: LightGCN-style (W^k = I)")
    optimizer: Literal["adagrad", "adam"] = Field("adagrad", description="optimizer of every parameter")
    lr: float = Field(0.05, gt=0.0, le=10.0, description="learning rate of the public parameters (coordinator)")
    lr_private: float | None = Field(None, gt=0.0, le=10.0,
                                     description="learning rate of item parameters (default lr)")
    reg: float = Field(0.0, ge=0.0, le=1e4, description="L2 per training rating on the final h_u and h_v")
    weight_decay: float = Field(0.0, ge=0.0, le=1e6, description="uniform L2 on e^0: items at the party, users at "
                                "the coordinator")
    reg_bias: float = Field(0.0, ge=0.0, le=1e4, description="L2 per training rating on user and item biases")
    reg_warmup: int = Field(0, ge=0, le=100_000, description="rounds over which reg and weight_decay ramp up "
                            "linearly from 0 (lets embeddings leave the zero saddle before strong L2 applies)")
    patience: int = Field(30, ge=1, le=100_000, description="early stopping: the run ends after this many rounds "
                          "without a better validation RMSE (needs validation labels at the parties, or "
                          "valid_fraction); a run that trains the ranking objective (rank_weight > 0) stops and "
                          "keeps its round by validation NDCG@10 instead, after rank_patience rounds if set")
    rank_patience: int | None = Field(None, ge=1, le=100_000, description="early-stopping patience when the run "
                                      "watches the pooled validation NDCG@10 (rank_weight > 0, or no party "
                                      "reports rating errors); None: patience")
    valid_fraction: float = Field(0.0, ge=0.0, le=0.5, description="a party with no validation labels holds out "
                                  "this share of its training ratings (seeded) as its validation split, so early "
                                  "stopping works without labelling one; the first carve is kept at the party, so "
                                  "every later run scores the same validation pairs (0: none)")
    thd: float = Field(4.0, ge=-1e6, le=1e6, description="only ratings >= thd become graph edges")
    clip_bound: float = Field(0.5, gt=0.0, le=1e3, description="public gradients are clipped to this "
                              "L-infinity bound before ternary quantization")
    grad_scale: float = Field(1.0, gt=0.0, le=1e3, description="public gradients are multiplied by this before "
                              "clipping and quantization, and divided by it after aggregation")
    r: float = Field(3.0, gt=0.0, le=1e3, description="ternary quantization level (needs r >= clip_bound)")
    q_ratio: float = Field(0.2, gt=0.0, le=0.5, description="rows of the projection Φ: q = round(q_ratio · N)")
    projection_kind: Literal["gaussian", "sparse"] = Field("gaussian", description="dense Gaussian Φ or a sparse "
                                                           "sketch with nnz_per_column non-zeros per column")
    nnz_per_column: int = Field(4, ge=1, le=1024, description="non-zeros per column of a sparse Φ")
    alpha: float = Field(1.0, gt=0.0, le=1.0, description="participation rate: share of parties drawn each round")
    rank_weight: float = Field(0.0, ge=0.0, le=1e3, description="weight of each party's in-party full softmax "
                               "ranking loss (0: rating loss only); negatives are the party's own items outside a "
                               "user's training set")
    rank_dims: int = Field(0, ge=0, le=1023, description="trailing embedding coordinates used only by the ranking "
                           "score (must be < dim)")
    gradient_protection: Literal["ternary", "dgrec"] = Field(
        "ternary", description="how uploaded public gradients are protected when use_quantization is on: clip + "
        "ternary quantization (r, clip_bound), or DGREC's 1-bit encoding with unbiased decoding (dgrec_delta, "
        "dgrec_strength)")
    dgrec_delta: float = Field(0.1, gt=0.0, le=1e3, description="DGREC clipping threshold δ")
    dgrec_strength: float = Field(1.0, gt=0.0, le=1e3, description="DGREC perturbation strength β (β-LDP per "
                                  "element)")
    use_projection: bool = Field(True, description="parties exchange Φ-projected aggregates, not raw ones")
    use_quantization: bool = Field(True, description="uploaded public gradients are protected "
                                   "(gradient_protection); False: sent as they are")
    secure_aggregation: bool = Field(False, description="mask every per-party message the coordinator sums "
                                     "(pairwise X25519 masks); the coordinator API turns it on for every run "
                                     "unless the run's config sets it false")
    # ε below 1e-3 protects nothing more in practice and drives the accountant into underflow (N8).
    dp_epsilon: float | None = Field(None, ge=1e-3, le=50.0,
                                     description="interaction-level differential privacy: ε of the randomized "
                                     "response each party applies once to its training matrix (None: off)")
    dp_delta: float = Field(1e-6, ge=0.0, lt=1.0, description="δ at which the run's ε is reported")
    dp_budget_epsilon: float | None = Field(None, ge=1e-3, le=1e3, description="refuse the run (409) if its "
                                            "whole-run ε exceeds this (None: no budget)")
    dp_budget_delta: float = Field(1e-5, ge=0.0, lt=1.0, description="δ at which dp_budget_epsilon is checked")


class TrainConfig(VerFedGNNSettings):
    """Hyper-parameters and privacy switches of one training run (identical at every participant)."""

    rounds: int = Field(200, ge=1, le=100_000, description="at most this many rounds")
    seed: int = Field(0, ge=0, description="run seed: public-parameter initialisation, participant draws, Φ")
    projection_seed: int | None = Field(None, ge=0, description="Φ's seed when the parties agreed one (secure "
                                        "set-up; the coordinator cannot compute it); None: Φ from the run seed")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.use_quantization and self.gradient_protection == "ternary" and self.r < self.clip_bound:
            raise ValueError(f"r={self.r} must be >= clip_bound={self.clip_bound} (r >= ||g||_inf)")
        if self.rank_dims >= self.dim:
            raise ValueError(f"rank_dims={self.rank_dims} must leave rating coordinates (< dim={self.dim})")
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
            "gradient_protection": {"kind": self.gradient_protection if self.use_quantization else None,
                                    **({"delta": self.dgrec_delta, "strength": self.dgrec_strength,
                                        "ldp_epsilon_per_element": self.dgrec_strength}
                                       if self.use_quantization and self.gradient_protection == "dgrec" else {})},
            "secure_aggregation": {"enabled": self.secure_aggregation,
                                   "coordinator_sees": "sums over the round's participants only"
                                   if self.secure_aggregation else "each party's projections and uploads"},
            "differential_privacy": {
                **self.guarantee().as_record(),
                "budget": ({"epsilon": self.dp_budget_epsilon, "delta": self.dp_budget_delta}
                           if self.dp_budget_epsilon is not None else None),
                "user_level_epsilon_per_party": ("ε × M_p (group privacy over a user's M_p cells at a party)"
                                                 if self.dp_epsilon is not None else None),
                "held_out_error_sums": ("not reported (they would be outside the guarantee)"
                                        if self.dp_epsilon is not None else "reported each round"),
            },
            "randomness": {
                "coordinator": "run seed: public-parameter initialisation, participant draws",
                "parties_jointly": "projection Φ (seed agreed over pairwise X25519 keys; coordinator runs)",
                "each_party_alone": "item-embedding initialisation, quantization draws, randomized response "
                                    "(from the party's own secret; coordinator runs)",
            },
        }

    def guarantee(self) -> RunGuarantee:
        """The whole run's (ε, δ) for one interaction at one party (ε = inf without DP)."""
        return run_guarantee(epsilon=self.dp_epsilon, buckets=RATING_BUCKETS, delta=self.dp_delta)

    def reg_factor(self, round_index: int) -> float:
        """Multiplier of the L2 terms in round `round_index` (linear warm-up, then 1)."""
        return 1.0 if self.reg_warmup <= 0 else min(1.0, (round_index + 1) / self.reg_warmup)

    @property
    def private_lr(self) -> float:
        """Learning rate of the party's item parameters."""
        return self.lr_private if self.lr_private is not None else self.lr


RUN_DEFAULTS: dict[str, Any] = {"secure_aggregation": True}  # a coordinator run's settings unless its config differs


def _default_run_values() -> dict[str, Any]:
    """What a coordinator run with no preset and no settings gets: RUN_DEFAULTS over the default preset."""
    return {k: v for k, v in {**preset_values(DEFAULT_PRESET, "gcn"), **RUN_DEFAULTS}.items() if k != "rounds"}


def _run_schema(schema: dict[str, Any]) -> None:
    """The OpenAPI defaults of a run's settings are the default preset's (what a run gets when it sets nothing)."""
    for name, value in _default_run_values().items():
        schema["properties"][name]["default"] = value


class VerFedGNNRunSettings(VerFedGNNSettings):
    """VerFedGNN settings as a run's caller sets them: strict (numbers are JSON numbers, never strings or
    booleans; floats finite; keys known), and each one set overrides the run's preset."""

    model_config = ConfigDict(strict=True)

    def explicit(self) -> dict[str, Any]:
        """The settings the caller set (protocol aside), as plain values."""
        return self.model_dump(include=self.model_fields_set - {"protocol"})


class VerFedGNNRunConfig(VerFedGNNRunSettings):
    """A coordinator run's VerFedGNN settings: each one set here overrides the run's preset (default tuned-ranking).

    Strict: numbers must be JSON numbers (no strings, no booleans), floats finite, keys known.
    """

    model_config = ConfigDict(json_schema_extra=_run_schema)

    protocol: Literal["verfedgnn"] = Field("verfedgnn", description="the federated protocol of the run")


def run_config(config: Mapping[str, Any], *, seed: int, rounds: int) -> TrainConfig:
    """The engine config of a coordinator run: RUN_DEFAULTS, then the run's stored config, its seed and rounds.

    A run stores every setting it resolved at creation (preset and overrides, `protocol` included);
    runs stored before presets existed hold only the keys they set, over the engine's defaults.
    """
    settings = {k: v for k, v in config.items() if not (k == "protocol" and v == "verfedgnn")}
    return TrainConfig(**{**RUN_DEFAULTS, **settings, "seed": seed, "rounds": rounds})


def model_config(config: TrainConfig) -> VerFedGNNConfig:
    """The architecture part of a training config."""
    return VerFedGNNConfig(kind=config.model, dim=config.dim, layers=config.layers, activation=config.activation,
                           use_bias=config.use_bias, gate_init=config.gate_init, init_std=config.init_std,
                           rating_levels=config.rating_levels, transform=config.transform,
                           rank_dims=config.rank_dims, rank_bias=config.rank_weight > 0)


PHI_TAG = 7919  # separates Φ's stream from the other streams drawn from the same seed


def shared_projection(config: TrainConfig, n_users: int) -> ProjectionSpec:
    """The projection every participant regenerates: from the parties' agreed seed, else from the run seed."""
    base = config.projection_seed if config.projection_seed is not None else config.seed
    return projection_spec(seed=base + PHI_TAG, n=n_users, ratio=config.q_ratio,
                           kind=config.projection_kind, nnz_per_column=config.nnz_per_column)


def sparse_phi(spec: ProjectionSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(Φ, Φᵀ) of a sparse sketch as torch CSR matrices, built once from the spec's seeded blocks.

    Same Φ as `services.crypto.projection` (its block generator is reused), but projecting and
    reconstructing become two sparse matmuls instead of per-column bincounts at every call.
    """
    rows, cols, vals = [], [], []
    for j, a, b in proj._blocks(spec):
        r, sg = proj._sparse_block(spec, j, b - a)
        rows.append(r.ravel())
        cols.append(np.repeat(np.arange(a, b, dtype=np.int64), r.shape[1]))
        vals.append(sg.ravel().astype(np.float32) / np.float32(np.sqrt(r.shape[1])))
    r_t, c_t = torch.from_numpy(np.concatenate(rows)), torch.from_numpy(np.concatenate(cols))
    v_t = torch.from_numpy(np.concatenate(vals))
    phi = torch.sparse_coo_tensor(torch.stack([r_t, c_t]), v_t, (spec.q, spec.n), check_invariants=False)
    phi_t = torch.sparse_coo_tensor(torch.stack([c_t, r_t]), v_t, (spec.n, spec.q), check_invariants=False)
    return phi.coalesce().to_sparse_csr(), phi_t.coalesce().to_sparse_csr()


def make_optimizer(config: TrainConfig, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adagrad (paper) or Adam over `params`."""
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.Adagrad(params, lr=lr)
