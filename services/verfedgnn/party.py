"""Party side of a VerFedGNN training round (engine; the HTTP layer calls these same steps).

Per round: begin_round → for each layer: layer_projection, receive_projection_sum → finish_round.
Raw ratings, item embeddings and per-user counts stay here; what leaves is Φ X_p^k (q × D) and
clipped, ternary-quantized gradients of the public parameters.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch

from models.graph import BipartiteGraph
from models.metrics import error_sums
from models.vertical import (
    PartyForward,
    PrivateItems,
    PublicModel,
    build_private,
    build_public,
    predict,
    rank_scores,
    softmax_rank_loss,
)
from services.crypto.gradient_sharing import decode_1bit, encode_1bit
from services.crypto.projection import ProjectionSpec, project, projection_matrix, reconstruct
from services.crypto.quantization import quantize_gradients
from services.errors import ProtocolError
from services.verfedgnn.config import (
    TrainConfig,
    make_optimizer,
    model_config,
    shared_projection,
    sparse_phi,
)
from services.verfedgnn.types import (
    SPLITS,
    GradientUpload,
    MetricSums,
    PartyData,
    QuantizedArray,
    RatingTriples,
    party_number,
)

_DENSE_PHI_LIMIT = 20_000_000  # q·N entries below which Φ is cached densely (fast matmuls)


def _tensors(t: RatingTriples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.from_numpy(t.users), torch.from_numpy(t.items), torch.from_numpy(t.ratings)


class PartyTrainer:
    """One party's training state: local graph, private item parameters and their optimizer state."""

    def __init__(self, *, config: TrainConfig, data: PartyData, seed: int, local_seed: int | None = None) -> None:
        """`seed` is the run seed; `local_seed`, when given, is party-local randomness only this party
        holds (its item-embedding initialisation and quantization draws); Φ comes from `config.seed`."""
        self.config, self.data, self.seed = config, data, seed
        self.local_seed = local_seed
        self.party_id = data.party_id
        self.arch = model_config(config)
        tr = data.train
        if data.implicit and config.rank_weight <= 0:
            raise ProtocolError(f"party {data.party_id}: implicit feedback trains the ranking objective only, "
                                "which needs rank_weight > 0")
        # only high ratings are graph edges (all ratings are targets); every implicit interaction is one
        keep = tr.ratings >= config.thd if not data.implicit else np.ones(len(tr), dtype=bool)
        self.graph = BipartiteGraph.from_edges(torch.from_numpy(tr.users[keep]), torch.from_numpy(tr.items[keep]),
                                               n_users=data.n_users, n_items=data.n_items,
                                               levels=torch.from_numpy(self._levels(tr.ratings[keep])),
                                               n_levels=max(1, config.rating_levels))
        self.scale = data.total_items / max(1, data.n_items)
        self.public: PublicModel = build_public(config=self.arch, n_users=data.n_users, seed=seed)
        init_seed = (seed * 1_000_003 + party_number(self.party_id) % 1_000_003 if local_seed is None
                     else local_seed % (2**63))
        self.private: PrivateItems = build_private(config=self.arch, n_items=data.n_items, seed=init_seed)
        self.optimizer = make_optimizer(config, list(self.private.parameters()), config.private_lr)
        self._splits = {name: _tensors(data.split(name)) for name in SPLITS}
        counts = np.bincount(tr.users, minlength=data.n_users).astype(np.float32)
        self._user_counts = torch.from_numpy(counts)
        self._item_counts = torch.from_numpy(np.bincount(tr.items, minlength=data.n_items).astype(np.float32))
        self._rank = self._rank_targets(tr) if config.rank_weight > 0 else None
        self._spec: ProjectionSpec | None = None
        self._phi: torch.Tensor | None = None
        self._phi_sparse: tuple[torch.Tensor, torch.Tensor] | None = None
        self._forward: PartyForward | None = None
        self._round: int | None = None
        self._last: tuple[torch.Tensor, torch.Tensor] | None = None
        self._last_private: dict[str, np.ndarray] = {}
        self.last_metrics: dict[str, MetricSums] = {}  # every split, for the party's own evaluation

    def _rank_targets(self, tr: RatingTriples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(users with a training rating, their (U, M) training mask, row and item of every positive).

        Every training rating is a positive (its level goes to the rating loss); the mask keeps a
        user's training items out of the negatives. All of it stays at this party.
        """
        users, rows = np.unique(tr.users, return_inverse=True)
        seen = np.zeros((len(users), self.data.n_items), dtype=bool)
        seen[rows, tr.items] = True
        return (torch.from_numpy(users), torch.from_numpy(seen), torch.from_numpy(rows.astype(np.int64)),
                torch.from_numpy(tr.items.astype(np.int64)))

    def _levels(self, ratings: np.ndarray) -> np.ndarray:
        """Rating level of each edge: the rating range cut into `rating_levels` equal steps."""
        n = self.config.rating_levels
        if n <= 1:
            return np.zeros(ratings.shape[0], dtype=np.int64)
        if self.data.implicit:  # an interaction is a positive: the top level
            return np.full(ratings.shape[0], n - 1, dtype=np.int64)
        span = max(1e-9, self.data.rating_max - self.data.rating_min)
        pos = np.rint((ratings - self.data.rating_min) / span * (n - 1))
        return np.clip(pos, 0, n - 1).astype(np.int64)

    # ---- projection -------------------------------------------------------------------
    def _projection(self) -> ProjectionSpec:
        if self._spec is None:
            self._spec = shared_projection(self.config, self.data.n_users)
            if self._spec.q * self._spec.n <= _DENSE_PHI_LIMIT:
                self._phi = torch.from_numpy(projection_matrix(self._spec))
            elif self._spec.kind == "sparse":
                with warnings.catch_warnings():  # "sparse CSR is beta" is noise here
                    warnings.simplefilter("ignore")
                    self._phi_sparse = sparse_phi(self._spec)
        return self._spec

    def _project(self, x: torch.Tensor) -> np.ndarray:
        spec = self._projection()
        if self._phi is not None:
            return (self._phi @ x).numpy()
        if self._phi_sparse is not None:
            return torch.sparse.mm(self._phi_sparse[0], x).numpy()
        return project(spec, x.numpy())

    def _reconstruct(self, y: np.ndarray) -> torch.Tensor:
        spec = self._projection()
        if self._phi is not None:
            return self._phi.T @ torch.from_numpy(y)
        if self._phi_sparse is not None:
            return torch.sparse.mm(self._phi_sparse[1], torch.from_numpy(y))
        return torch.from_numpy(reconstruct(spec, y))

    # ---- round steps ----------------------------------------------------------------------
    def begin_round(self, *, round_index: int, public: dict[str, np.ndarray]) -> None:
        """Load this round's public parameters and start a fresh forward."""
        self.public.load_arrays(public)
        self.public.zero_grad(set_to_none=True)
        self.optimizer.zero_grad(set_to_none=True)
        self._round = round_index
        self._forward = PartyForward(public=self.public, private=self.private, graph=self.graph, scale=self.scale)

    def _require(self) -> PartyForward:
        if self._forward is None:
            raise ProtocolError(f"party {self.party_id}: no round in progress")
        return self._forward

    def layer_projection(self, *, layer: int) -> np.ndarray:
        """Y_c^k = Φ X_c^k (float32 (q, D)); the raw X_c^k (N, D) when projection is disabled."""
        fwd = self._require()
        try:
            own = fwd.contribution(layer).detach()
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        out = self._project(own) if self.config.use_projection else own.numpy()
        return np.ascontiguousarray(out, dtype=np.float32)

    def receive_projection_sum(self, *, layer: int, others: np.ndarray) -> None:
        """Take the relayed (participation-scaled) sum of the other parties' projections; compute layer k+1."""
        fwd = self._require()
        others_t = self._reconstruct(others) if self.config.use_projection else torch.from_numpy(others)
        if others_t.shape != (self.data.n_users, self.arch.dim):
            raise ProtocolError(f"others' aggregate has shape {tuple(others_t.shape)}")
        try:
            fwd.advance(layer, others_t.to(torch.float32))
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc

    def finish_round(self) -> GradientUpload:
        """Loss on own training ratings, private step, protected public gradients, metric sums."""
        fwd = self._require()
        try:
            h_u, h_v = fwd.final()
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        loss = self._loss(h_u, h_v)
        loss.backward()
        metrics = self._metrics(h_u.detach(), h_v.detach())
        # the private biases of this forward (before the step), so a published model is the one scored
        self._last_private = {k: v.detach().numpy().copy() for k, v in self.private.named_parameters()
                              if k != "item_emb"}
        self.last_metrics = metrics
        if self.config.dp_epsilon is not None:  # held-out ratings are not randomized: their sums stay here
            metrics = {"train": metrics["train"]}
        self.optimizer.step()
        self._last = (h_u.detach(), h_v.detach())
        grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
                 for name, p in self.public.named_parameters()}
        upload = self._protect(grads, loss=float(loss.detach()), metrics=metrics)
        self._forward = None
        return upload

    def _loss(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """Σ (r̂ − r)² over own training ratings + per-rating L2 on h_u, h_v and the biases (+ the ranking loss).

        An implicit party has no ratings: no squared error and no rating-bias L2, only the ranking loss
        (weighted by its interactions' weights) and the L2 on h.
        """
        c, pub, prv = self.config, self.public, self.private
        if self.data.implicit:
            loss = h_u.new_zeros(())
        else:
            users, items, ratings = self._splits["train"]
            err = predict(self.public, self.private, h_u, h_v, users, items) - ratings
            loss = (err * err).sum()
        ramp = c.reg_factor(self._round or 0)
        if c.reg > 0:
            # on the final representations h (= e^0 for MF) so propagated layers are regularised too
            loss = loss + ramp * c.reg * ((self._user_counts * h_u.pow(2).sum(1)).sum()
                                   + (self._item_counts * h_v.pow(2).sum(1)).sum())
        if c.weight_decay > 0:  # the user half is applied by the coordinator (it holds e_u^0)
            loss = loss + ramp * c.weight_decay * prv.item_emb.pow(2).sum()
        if c.reg_bias > 0 and not self.data.implicit:
            loss = loss + c.reg_bias * ((self._user_counts * pub.user_bias.pow(2)).sum()
                                        + (self._item_counts * prv.item_bias.pow(2)).sum())
        if self._rank is not None:
            loss = loss + c.rank_weight * self._rank_loss(h_u, h_v)
        return loss

    def _rank_loss(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """In-party full softmax over own items: no item id, score or count of this party leaves it."""
        assert self._rank is not None
        users, seen, rows, items = self._rank
        weights = None
        if self.data.implicit:  # interaction weights, scaled to mean 1 so the loss has the unweighted scale
            w = self._splits["train"][2]
            weights = w / w.mean()
        return softmax_rank_loss(rank_scores(self.private, h_u.index_select(0, users), h_v), seen, rows, items,
                                 weights)

    @torch.no_grad()
    def _metrics(self, h_u: torch.Tensor, h_v: torch.Tensor) -> dict[str, MetricSums]:
        if self.data.implicit:  # no ratings to score: pooled RMSE is over the explicit parties only
            return {name: MetricSums() for name in self._splits}
        out = {}
        for name, (users, items, ratings) in self._splits.items():
            pred = predict(self.public, self.private, h_u, h_v, users, items)
            out[name] = MetricSums(*error_sums(pred.clamp(self.data.rating_min, self.data.rating_max), ratings))
        return out

    def _protect(self, grads: dict[str, np.ndarray], *, loss: float, metrics: dict[str, MetricSums]) -> GradientUpload:
        """Clip + ternary-quantize (privacy on) or send dense gradients (privacy off)."""
        assert self._round is not None
        if not self.config.use_quantization:
            return GradientUpload(self.party_id, self._round, loss, dense=grads, metrics=metrics)
        base = self.seed if self.local_seed is None else self.local_seed
        rng = np.random.default_rng([base, party_number(self.party_id), self._round])
        gs = np.float32(self.config.grad_scale)
        scaled = grads if gs == 1 else {k: v * gs for k, v in grads.items()}
        if self.config.gradient_protection == "dgrec":
            packed = {k: self._dgrec(scaled[k], rng) for k in sorted(scaled)}
            return GradientUpload(self.party_id, self._round, loss, quantized=packed, metrics=metrics)
        q = quantize_gradients(scaled, clip_bound=self.config.clip_bound, r=self.config.r, rng=rng)
        packed = {k: QuantizedArray(tuple(u.shape), float(u.r), np.asarray(u.indices, np.int64),
                                    np.asarray(u.signs, np.int8)) for k, u in q.items()}
        return GradientUpload(self.party_id, self._round, loss, quantized=packed, metrics=metrics)

    def _dgrec(self, grad: np.ndarray, rng: np.random.Generator) -> QuantizedArray:
        """DGREC 1-bit codes of every element, carried as a sign at every index with the decoding scale as r.

        The coordinator's ternary decoding (r · sign at each index) is then exactly DGREC's unbiased
        decoding δ(e^β+1)/(e^β−1) · code, so one wire format and one aggregation serve both.
        """
        c = self.config
        bits = encode_1bit(grad, delta=c.dgrec_delta, strength=c.dgrec_strength, rng=rng)
        scale = float(decode_1bit(np.ones(1, np.int8), delta=c.dgrec_delta, strength=c.dgrec_strength)[0])
        return QuantizedArray(tuple(grad.shape), scale, np.arange(bits.size, dtype=np.int64), bits.ravel())

    # ---- state and serving ----------------------------------------------------------------
    def state_dict(self) -> dict[str, object]:
        """Private parameters and optimizer state (for resume)."""
        return {"private": {k: v.detach().clone() for k, v in self.private.state_dict().items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "round": self._round}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what `state_dict` returned."""
        self.private.load_state_dict(state["private"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self._round = state["round"]  # type: ignore[assignment]
        self._forward = None

    def serving_model(self) -> dict[str, np.ndarray]:
        """Final h_u (all users), h_v (own items) and biases from the latest completed forward."""
        if self._last is None:
            raise ProtocolError(f"party {self.party_id}: no completed round to serve")
        h_u, h_v = self._last
        out = {"user_repr": h_u.numpy(), "item_repr": h_v.numpy(), "item_bias": self._last_private["item_bias"],
               "rating_dim": np.array(self.arch.rating_dim)}
        if "rank_bias" in self._last_private:
            out["rank_bias"] = self._last_private["rank_bias"]
        if self.arch.use_bias:
            out["user_bias"] = self.public.user_bias.detach().numpy().copy()
            out["global_bias"] = self.public.global_bias.detach().numpy().copy()
        return out
