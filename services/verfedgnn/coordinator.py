"""Coordinator side of VerFedGNN training: public parameters, participant choice, relay, aggregation.

The coordinator sees only projected aggregates (q × D) and protected gradients; it never sees
ratings or item embeddings.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch

from models.vertical import PublicModel, build_public
from services.crypto.participation import participation_scale, select_participants
from services.crypto.quantization import TernaryUpload, ternary_dequantize
from services.errors import ProtocolError
from services.verfedgnn.config import TrainConfig, make_optimizer, model_config
from services.verfedgnn.types import (
    SPLITS,
    GradientUpload,
    MetricSums,
    RoundMetrics,
    pooled_ndcg,
    rmse_mae,
)
from services.verfedgnn.warm import load_mapped

_SELECT_TAG = 104729  # separates the participant-draw stream from other seeded streams


def upload_gradients(upload: GradientUpload, *, grad_scale: float) -> dict[str, np.ndarray]:
    """A party's public gradients as the coordinator decodes them (ternary × r, divided by grad_scale)."""
    if upload.quantized:
        inv = np.float32(1.0 / grad_scale)
        return {k: ternary_dequantize(TernaryUpload(q.shape, q.r, q.indices, q.signs)) * inv
                for k, q in upload.quantized.items()}
    return {k: np.asarray(v, dtype=np.float32) for k, v in upload.dense.items()}


class CoordinatorTrainer:
    """Holds and updates the public parameters; aggregates with the partial-participation estimator."""

    def __init__(self, *, config: TrainConfig, n_users: int, item_counts: Mapping[str, int],
                 global_mean: float = 0.0) -> None:
        if not item_counts:
            raise ValueError("at least one party is required")
        self.config = config
        self.n_users = n_users
        self.item_counts = {str(k): int(v) for k, v in sorted(item_counts.items())}
        self.public: PublicModel = build_public(config=model_config(config), n_users=n_users,
                                                seed=config.seed, global_mean=global_mean)
        self.optimizer = make_optimizer(config, list(self.public.parameters()), config.lr)
        self.round_index = 0

    def public_params(self) -> dict[str, np.ndarray]:
        """Current public parameters (float32 arrays by name)."""
        return self.public.arrays()

    def select_participants(self, *, round_index: int, available: list[str]) -> list[str]:
        """A_t: a seeded draw of ⌈α·P⌉ parties among those available (sorted; order-independent)."""
        pool = sorted(p for p in set(available) if p in self.item_counts)
        if not pool:
            raise ProtocolError("no known party is available")
        if self.config.alpha >= 1.0:
            return pool
        rng = np.random.default_rng([self.config.seed, _SELECT_TAG, round_index])
        want = max(1, round(self.config.alpha * len(self.item_counts)))
        return select_participants(pool, rate=min(1.0, want / len(pool)), rng=rng)

    def relay(self, *, layer: int, projections: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """For each participant c: (Σ_{i≠c} M_i / Σ_{p∈A_t, p≠c} M_p) · Σ_{p∈A_t, p≠c} Y_p^k (zeros if alone)."""
        names = sorted(projections)
        if not names:
            raise ProtocolError(f"layer {layer}: no projections to relay")
        shapes = {projections[n].shape for n in names}
        if len(shapes) != 1:
            raise ProtocolError(f"layer {layer}: projections have different shapes {shapes}")
        total = np.sum([projections[n].astype(np.float64) for n in names], axis=0)
        out = {}
        for c in names:
            others = [p for p in names if p != c]
            if not others:
                out[c] = np.zeros_like(projections[c], dtype=np.float32)
                continue
            counts = {p: m for p, m in self.item_counts.items() if p != c}
            scale = participation_scale(item_counts=counts, participants=others)
            out[c] = ((total - projections[c]) * scale).astype(np.float32)
        return out

    def _decode(self, upload: GradientUpload) -> dict[str, np.ndarray]:
        return upload_gradients(upload, grad_scale=self.config.grad_scale)

    def aggregate_and_step(self, *, uploads: dict[str, GradientUpload]) -> RoundMetrics:
        """Estimate Σ_p ∇f_p from the participants' uploads, take one optimizer step, summarise."""
        names = sorted(uploads)
        if not names:
            raise ProtocolError("no uploads to aggregate")
        scale = participation_scale(item_counts=self.item_counts, participants=names)
        params = dict(self.public.named_parameters())
        total = {k: np.zeros(p.shape, dtype=np.float32) for k, p in params.items()}
        for name in names:
            for k, g in self._decode(uploads[name]).items():
                if k not in total or g.shape != total[k].shape:
                    raise ProtocolError(f"party {name}: unexpected gradient {k} {g.shape}")
                total[k] += g
        self._step(total, scale=scale, round_index=uploads[names[0]].round_index)
        return self._summary(uploads, names)

    def _step(self, total: dict[str, np.ndarray], *, scale: float, round_index: int) -> None:
        """One optimizer step on the estimated gradient `scale` · Σ_p ∇f_p (+ the exact L2 of e_u^0)."""
        params = dict(self.public.named_parameters())
        self.optimizer.zero_grad(set_to_none=True)
        grads = {k: torch.from_numpy(total[k] * np.float32(scale)) for k in params}
        if self.config.weight_decay > 0:  # the L2 term of e_u^0 needs no party data: exact, no noise
            ramp = self.config.reg_factor(round_index)  # the parties' round, same ramp
            grads["user_emb"] += 2.0 * ramp * self.config.weight_decay * params["user_emb"].detach()
        for k, p in params.items():
            p.grad = grads[k]
        self.optimizer.step()
        self.round_index += 1

    def step_with_sums(self, *, round_index: int, participants: list[str], grads: dict[str, np.ndarray],
                       loss: float, metrics: dict[str, MetricSums], upload_bytes: int) -> RoundMetrics:
        """Secure aggregation: the same step from the participants' SUMS only (no per-party figure exists)."""
        names = sorted(participants)
        if not names:
            raise ProtocolError("no participants to aggregate")
        params = dict(self.public.named_parameters())
        total = {}
        for k, p in params.items():
            if k not in grads or tuple(grads[k].shape) != tuple(p.shape):
                raise ProtocolError(f"summed gradient {k} missing or of the wrong shape")
            total[k] = np.asarray(grads[k], dtype=np.float32)
        self._step(total, scale=participation_scale(item_counts=self.item_counts, participants=names),
                   round_index=round_index)
        rmse, mae = {}, {}
        for split in SPLITS:
            rmse[split], mae[split] = rmse_mae([metrics.get(split, MetricSums())])
        nnz = sum(int(np.count_nonzero(g)) for g in total.values())
        return RoundMetrics(round_index=round_index, participants=names, loss=float(loss), rmse=rmse, mae=mae,
                            per_party={}, upload_bytes=upload_bytes, upload_nonzeros=nnz,
                            ndcg={"valid": pooled_ndcg([metrics.get("valid", MetricSums())])})

    def _summary(self, uploads: dict[str, GradientUpload], names: list[str]) -> RoundMetrics:
        rmse, mae, per_party = {}, {}, {}
        for split in SPLITS:
            rmse[split], mae[split] = rmse_mae([uploads[n].metrics.get(split, MetricSums()) for n in names])
        for n in names:
            row = {}
            for split in SPLITS:
                row[f"{split}_rmse"], row[f"{split}_mae"] = rmse_mae([uploads[n].metrics.get(split, MetricSums())])
            per_party[n] = row
        nnz = sum(int(q.indices.size) for n in names for q in uploads[n].quantized.values())
        size = sum(TernaryUpload(q.shape, q.r, q.indices, q.signs).nbytes()
                   for n in names for q in uploads[n].quantized.values())
        size += sum(int(a.nbytes) for n in names for a in uploads[n].dense.values())
        ndcg = {"valid": pooled_ndcg([uploads[n].metrics.get("valid", MetricSums()) for n in names])}
        return RoundMetrics(round_index=uploads[names[0]].round_index, participants=names,
                            loss=float(sum(uploads[n].loss for n in names)), rmse=rmse, mae=mae,
                            per_party=per_party, upload_bytes=size, upload_nonzeros=nnz, ndcg=ndcg)

    def state_dict(self) -> dict[str, object]:
        """Public parameters, optimizer state and round counter (for resume)."""
        return {"public": self.public_params(), "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "round_index": self.round_index}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what `state_dict` returned."""
        self.public.load_arrays(state["public"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self.round_index = int(state["round_index"])  # type: ignore[call-overload]

    def load_warm(self, state: dict[str, object], *, user_rows: np.ndarray) -> None:
        """Start from a previous run's `state_dict`: e_u^0 and b_u copied by `user_rows` (-1: new user, kept fresh)."""
        load_mapped(module=self.public, optimizer=self.optimizer, params=state["public"],  # type: ignore[arg-type]
                    optimizer_state=state.get("optimizer"), rows=user_rows,  # type: ignore[arg-type]
                    by_row={"user_emb", "user_bias"})
