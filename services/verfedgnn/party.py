"""Party side of a VerFedGNN training round (engine; the HTTP layer calls these same steps).

Per round: begin_round → for each layer: layer_projection, receive_projection_sum → finish_round.
Raw ratings, item embeddings and per-user counts stay here; what leaves is Φ X_p^k (q × D) and
clipped, ternary-quantized gradients of the public parameters.

The party's users outside the intersection (PartyData.private_user_ids) train here too, with rows
e_u^0, b_u of their own (`PrivateUsers`) that never leave: the round's `PartyForward` propagates them
over this party's graph with the public layers, and each item's layer k+1 aggregates all its raters
here, aligned and private (as the party alone would). Their loss trains their rows and the private
item parameters and gives the public parameters no gradient (`finish_round`); the GCN item degrees
count them on every side. Every message stays
sized by the aligned users and carries no id of theirs; from layer 1 on its values depend on their
rows through the items' representations, as they depend on the item parameters.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from models.graph import BipartiteGraph
from models.metrics import RELEVANT_THRESHOLD, error_sums, ndcg_sum
from models.scoring import serving_scores
from models.vertical import (
    PartyForward,
    PrivateFeatures,
    PrivateItems,
    PrivateUsers,
    PublicModel,
    build_features,
    build_private,
    build_private_users,
    build_public,
    party_item_graph,
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
    RANK_K,
    SPLITS,
    FeatureEdges,
    GradientUpload,
    MetricSums,
    PartyData,
    QuantizedArray,
    RatingTriples,
    party_number,
)
from services.verfedgnn.warm import load_mapped

_DENSE_PHI_LIMIT = 20_000_000  # q·N entries below which Φ is cached densely (fast matmuls)
_FEATURES_TAG = 0x464541  # separates the side-information rows' initialisation from the item initialisation
_OWN_USERS_TAG = 0x4F574E  # separates the private user rows' initialisation from the item initialisation
_VALID_SAMPLE_TAG = 0x56524B  # separates the validation ranking sample's draw from every other seeded draw
# At most this many aligned validation users per party are ranked each round (a sample seeded by the party,
# the same in every run): the validation NDCG@10 then costs O(VALID_RANKING_USERS x M_p) a round at most.
VALID_RANKING_USERS = 2000
_RANKING_CHUNK = 256  # users scored at once (a chunk x M_p score block)

RankTargets = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def sample_valid_users(eligible: np.ndarray, *, party_id: str, limit: int | None = None) -> np.ndarray:
    """The validation users a party ranks: all of `eligible` (sorted user indices), or a sample of `limit`.

    Seeded by the party alone, not the run: successive runs over the same data rank the same users, so the
    promotion gate compares two releases on one sample. `limit` None: VALID_RANKING_USERS.
    """
    limit = VALID_RANKING_USERS if limit is None else limit
    if eligible.size <= limit:
        return eligible
    rng = np.random.default_rng([party_number(party_id), _VALID_SAMPLE_TAG])
    return np.sort(rng.choice(eligible, size=limit, replace=False))


@dataclass(frozen=True)
class _ValidRanking:
    """The validation users a party ranks, their training items (never candidates) and relevant items."""

    users: np.ndarray  # (S,) aligned user rows, sorted
    train: tuple[np.ndarray, np.ndarray]  # CSR (offsets (S + 1,), items) of their training items
    relevant: tuple[np.ndarray, np.ndarray]  # CSR of their relevant validation items

    def block(self, lo: int, hi: int, n_items: int) -> tuple[np.ndarray, np.ndarray]:
        """(seen, relevant) (hi - lo, n_items) bool matrices of users lo..hi-1 of the sample."""
        out = []
        for ptr, items in (self.train, self.relevant):
            mask = np.zeros((hi - lo, n_items), dtype=bool)
            mask[np.repeat(np.arange(hi - lo), np.diff(ptr[lo:hi + 1])), items[ptr[lo]:ptr[hi]]] = True
            out.append(mask)
        return out[0], out[1]


def _csr(users: np.ndarray, rows: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items of each of `users` (sorted) as CSR offsets and items, from parallel (row user, item) arrays."""
    mine = np.isin(rows, users)
    at = np.searchsorted(users, rows[mine])
    order = np.argsort(at, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(at, minlength=users.size))]).astype(np.int64)
    return ptr, items[mine][order].astype(np.int64)


def _item_links(features: FeatureEdges, n_items: int) -> torch.Tensor:
    """(n_items, n_tokens) sparse matrix with 1/|values of v| at each (v, value of v): a mean over the values."""
    per_item = np.bincount(features.entities, minlength=n_items).astype(np.float32)
    values = 1.0 / per_item[features.entities]
    index = torch.from_numpy(np.stack([features.entities, features.tokens]).astype(np.int64))
    return torch.sparse_coo_tensor(index, torch.from_numpy(values), (n_items, features.n_tokens),
                                   check_invariants=False).coalesce()


def _tensors(t: RatingTriples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.from_numpy(t.users), torch.from_numpy(t.items), torch.from_numpy(t.ratings)


def _counts(values: np.ndarray, n: int) -> torch.Tensor:
    return torch.from_numpy(np.bincount(values, minlength=n).astype(np.float32))


@dataclass(frozen=True)
class _Targets:
    """One group of users' training targets: the aligned users, or the party's private users."""

    train: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (user row of the group, item, rating)
    user_counts: torch.Tensor  # training ratings per user of the group
    item_counts: torch.Tensor  # training ratings per item by the group's users
    user_bias: torch.Tensor  # the group's b_u (public for aligned users, private rows otherwise)
    decayed: torch.Tensor  # the e^0 rows this party applies weight decay to in the group's loss
    rank: RankTargets | None


class PartyTrainer:
    """One party's training state: local graph, private item parameters and their optimizer state."""

    def __init__(self, *, config: TrainConfig, data: PartyData, seed: int, local_seed: int | None = None) -> None:
        """`seed` is the run seed; `local_seed`, when given, is party-local randomness only this party
        holds (its item-embedding initialisation and quantization draws); Φ comes from `config.seed`."""
        self.config, self.data, self.seed = config, data, seed
        self.local_seed = local_seed
        self.party_id = data.party_id
        self.arch = model_config(config)
        tr = data.aligned("train")
        if data.implicit and config.rank_weight <= 0:
            raise ProtocolError(f"party {data.party_id}: implicit feedback trains the ranking objective only, "
                                "which needs rank_weight > 0")
        # only high ratings are graph edges (all ratings are targets); every implicit interaction is one
        keep = self._edges(tr)
        # A user attribute value this party holds is a node of its graph after its items (a user links to it
        # as to an item): it reaches the aligned users' contribution, never a message of its own.
        ut, it = data.user_features, data.item_features  # None: the party holds none (or PARTY_USE_FEATURES off)
        self._n_user_tokens = ut.n_tokens if ut is not None else 0
        self.n_graph_items = data.n_items + self._n_user_tokens
        self.graph = self._graph(tr.users[keep], tr.items[keep], tr.ratings[keep], rows=(0, data.n_users))
        self.scale = data.total_items / max(1, data.n_items)
        self.public: PublicModel = build_public(config=self.arch, n_users=data.n_users, seed=seed)
        init_seed = (seed * 1_000_003 + party_number(self.party_id) % 1_000_003 if local_seed is None
                     else local_seed % (2**63))
        self.private: PrivateItems = build_private(config=self.arch, n_items=data.n_items, seed=init_seed)
        self.optimizer = make_optimizer(config, list(self.private.parameters()), config.private_lr)
        self.features: PrivateFeatures | None = None
        self._feature_optimizer: torch.optim.Optimizer | None = None
        if self._n_user_tokens or (it is not None and it.n_tokens):
            self.features = build_features(config=self.arch, n_user_tokens=self._n_user_tokens,
                                           n_item_tokens=it.n_tokens if it is not None else 0,
                                           item_links=_item_links(it, data.n_items) if it is not None else None,
                                           seed=(init_seed ^ _FEATURES_TAG) % (2**63))
            self._feature_optimizer = make_optimizer(config, list(self.features.parameters()), config.private_lr)
        self._splits = {name: _tensors(data.aligned(name)) for name in SPLITS}
        self._user_counts = _counts(tr.users, data.n_users)
        self._item_counts = _counts(tr.items, data.n_items)
        self._rank = self._rank_targets(tr) if config.rank_weight > 0 else None
        self._aligned = _Targets(_tensors(tr), self._user_counts, self._item_counts, self.public.user_bias,
                                 self.private.item_emb, self._rank)
        self.own_users: PrivateUsers | None = None  # rows of the private users (None: the party has none)
        self._own_optimizer: torch.optim.Optimizer | None = None
        self._own: _Targets | None = None
        self._own_splits: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        if data.n_private:
            self._init_own_users(init_seed)
        self._spec: ProjectionSpec | None = None
        self._phi: torch.Tensor | None = None
        self._phi_sparse: tuple[torch.Tensor, torch.Tensor] | None = None
        self._forward: PartyForward | None = None
        self._round: int | None = None
        self._last: tuple[torch.Tensor, torch.Tensor] | None = None
        self._last_own: tuple[torch.Tensor, np.ndarray] | None = None  # private users' h and b_u of that forward
        self._last_private: dict[str, np.ndarray] = {}
        self.last_metrics: dict[str, MetricSums] = {}  # every split, for the party's own evaluation
        self.last_private_metrics: dict[str, MetricSums] = {}  # the private users' (never reported)
        self._valid_ranking = self._ranking_targets()

    def _init_own_users(self, init_seed: int) -> None:
        """Rows, optimizer, graph and targets of the private users (indices n_users.. of the data, from 0 here)."""
        data, config = self.data, self.config
        own = data.private("train")
        keep = self._edges(own)
        graph = self._graph(own.users[keep], own.items[keep], own.ratings[keep],
                            rows=(data.n_users, data.n_users + data.n_private))
        # An item's degree is every edge it has here: the private users' neighbourhoods are exact at this party.
        self._own_graph = replace(graph, item_degree=graph.item_degree + self.graph.item_degree, cache={})
        self._item_graph = party_item_graph(self.graph, graph, self.scale)
        # The aligned users' aggregate normalises by an item's every rater here too, as the party alone would
        # (chosen on validation NDCG over the aligned-only degree; docs/federation.md).
        self.graph = replace(self.graph, item_degree=self._own_graph.item_degree, cache={})
        self.own_users = build_private_users(config=self.arch, n_users=data.n_private,
                                             seed=(init_seed ^ _OWN_USERS_TAG) % (2**63))
        self._own_optimizer = make_optimizer(config, list(self.own_users.parameters()), config.private_lr)
        self._own_splits = {name: _tensors(data.private(name)) for name in SPLITS}
        self._own = _Targets(_tensors(own), _counts(own.users, data.n_private), _counts(own.items, data.n_items),
                             self.own_users.user_bias, self.own_users.user_emb,
                             self._rank_targets(own) if config.rank_weight > 0 else None)

    def _graph(self, users: np.ndarray, items: np.ndarray, ratings: np.ndarray, *,
               rows: tuple[int, int]) -> BipartiteGraph:
        """The graph of rating edges of users `rows` (PartyData rows lo..hi-1, indexed from 0 here) plus their
        links to this party's user attribute nodes (items n_items.., at the top rating level)."""
        lo, hi = rows
        levels = self._levels(ratings)
        ut = self.data.user_features if self._n_user_tokens else None
        if ut is not None:
            mine = (ut.entities >= lo) & (ut.entities < hi)
            users = np.concatenate([users, ut.entities[mine] - lo])
            items = np.concatenate([items, ut.tokens[mine] + self.data.n_items])
            levels = np.concatenate([levels, np.full(int(mine.sum()), max(0, self.config.rating_levels - 1),
                                                     dtype=np.int64)])
        return BipartiteGraph.from_edges(torch.from_numpy(users), torch.from_numpy(items), n_users=hi - lo,
                                         n_items=self.n_graph_items, levels=torch.from_numpy(levels),
                                         n_levels=max(1, self.config.rating_levels))

    def _ranking_targets(self) -> _ValidRanking | None:
        """Who the validation NDCG ranks: aligned users with a relevant validation item (rating >= 4; every
        interaction of an implicit party), at most VALID_RANKING_USERS of them; None when there is none.

        Aligned users only, like the rating sums: any count that leaves the party covers aligned users.
        """
        valid = self.data.aligned("valid")
        threshold = 0.0 if self.data.implicit else RELEVANT_THRESHOLD  # implicit weights are > 0
        rel = valid.subset(valid.ratings >= threshold)
        users = self._valid_users(np.unique(rel.users))
        if users.size == 0:
            return None
        tr = self.data.aligned("train")
        return _ValidRanking(users, _csr(users, tr.users, tr.items), _csr(users, rel.users, rel.items))

    def _valid_users(self, eligible: np.ndarray) -> np.ndarray:
        """The users (rows of this trainer) to rank, of the eligible ones (a block trainer samples the whole party)."""
        return sample_valid_users(eligible, party_id=self.party_id)

    def _valid_ndcg(self, h_u: torch.Tensor, h_v: torch.Tensor) -> tuple[float, int]:
        """(Σ NDCG@RANK_K, users) of this forward's serving scores on the party's own catalogue: candidates are
        the user's items without a training row here (the score `serving_model` serves; models.scoring)."""
        vr = self._valid_ranking
        if vr is None:
            return 0.0, 0
        item_repr, prv = h_v.numpy(), self._last_private
        rank_bias = prv.get("rank_bias")
        users, m = h_u.numpy(), item_repr.shape[0]
        global_bias, user_bias = 0.0, np.zeros(users.shape[0], np.float32)
        if self.arch.use_bias:
            global_bias = float(self.public.global_bias.detach().numpy().reshape(-1)[0])
            user_bias = self.public.user_bias.detach().numpy().reshape(-1)
        total = 0.0
        for lo in range(0, vr.users.size, _RANKING_CHUNK):
            rows = vr.users[lo:lo + _RANKING_CHUNK]
            scores = serving_scores(users[rows], item_repr, rank_bias=rank_bias, rating_dim=self.arch.rating_dim,
                                    global_bias=global_bias, user_bias=user_bias[rows],
                                    item_bias=prv["item_bias"].reshape(m))
            seen, relevant = vr.block(lo, lo + rows.size, m)
            total += ndcg_sum(scores, seen, relevant, RANK_K)
        return total, int(vr.users.size)

    def _rank_targets(self, tr: RatingTriples) -> RankTargets:
        """(users with a training rating, their (U, M) training mask, row and item of every positive).

        Every training rating is a positive (its level goes to the rating loss); the mask keeps a
        user's training items out of the negatives. All of it stays at this party.
        """
        users, rows = np.unique(tr.users, return_inverse=True)
        seen = np.zeros((len(users), self.data.n_items), dtype=bool)
        seen[rows, tr.items] = True
        return (torch.from_numpy(users), torch.from_numpy(seen), torch.from_numpy(rows.astype(np.int64)),
                torch.from_numpy(tr.items.astype(np.int64)))

    def _edges(self, tr: RatingTriples) -> np.ndarray:
        """Which training rows are graph edges: ratings >= thd; every interaction of an implicit party."""
        return tr.ratings >= self.config.thd if not self.data.implicit else np.ones(len(tr), dtype=bool)

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
        if self._own_optimizer is not None:
            self._own_optimizer.zero_grad(set_to_none=True)
        if self._feature_optimizer is not None:
            self._feature_optimizer.zero_grad(set_to_none=True)
        self._round = round_index
        own = {} if self.own_users is None else {"own": self.own_users, "own_graph": self._own_graph,
                                                 "item_graph": self._item_graph}
        item_input = None if self.features is None else self.features.item_input(self.private.item_emb)
        self._forward = PartyForward(public=self.public, private=self.private, graph=self.graph, scale=self.scale,
                                     item_input=item_input, **own)  # type: ignore[arg-type]

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
        h_v = h_v[:self.data.n_items]  # the attribute nodes after the items are never scored or served
        loss = self._loss(h_u, h_v)
        h_own = self._own_backward(fwd, h_v)  # before loss.backward(): they share the item path
        loss.backward()
        metrics = self._metrics(h_u.detach(), h_v.detach())
        # the private biases of this forward (before the step), so a published model is the one scored
        self._last_private = {k: v.detach().numpy().copy() for k, v in self.private.named_parameters()
                              if k != "item_emb"}
        if "valid" in metrics:  # the served model's validation ranking, summed (pooled like the errors)
            ndcg, ranked = self._valid_ndcg(h_u.detach(), h_v.detach())
            metrics["valid"] = replace(metrics["valid"], ndcg=ndcg, ranked=ranked)
        self.last_metrics = metrics
        if self.config.dp_epsilon is not None:  # held-out ratings are not randomized: their sums stay here
            metrics = {"train": metrics["train"]}
        self.optimizer.step()
        if self._feature_optimizer is not None:
            self._feature_optimizer.step()
        if h_own is not None and self.own_users is not None and self._own_optimizer is not None:
            self._last_own = (h_own, self.own_users.user_bias.detach().numpy().copy())
            self._own_optimizer.step()
        self._last = (h_u.detach(), h_v.detach())
        grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
                 for name, p in self.public.named_parameters()}
        upload = self._protect(grads, loss=float(loss.detach()), metrics=metrics)
        self._forward = None
        return upload

    def _own_backward(self, fwd: PartyForward, h_v: torch.Tensor) -> torch.Tensor | None:
        """The private users' loss; its gradients go to private parameters only. Their h (detached).

        The gradients are taken with respect to the private item parameters and the private user rows
        alone (the public parameters count as constants, as if their weights were detached), and added
        to what the aligned loss gives those parameters: the private users' loss adds nothing to the
        public gradients (the aligned users' loss reaches the public weights through item
        representations that aggregate private rows too, by design: docs/federation.md).
        """
        if self.own_users is None or self._own is None:
            return None
        try:
            h_own = fwd.final_own()
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        loss = self._loss(h_own, h_v, self._own)
        features = () if self.features is None else tuple(self.features.parameters())
        params = [p for p in (*self.private.parameters(), *self.own_users.parameters(), *features) if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
        for p, g in zip(params, grads):
            if g is not None:
                p.grad = g if p.grad is None else p.grad + g
        self.last_private_metrics = self._metrics(h_own.detach(), h_v.detach(), own=True)
        return h_own.detach()

    def _loss(self, h_u: torch.Tensor, h_v: torch.Tensor, targets: _Targets | None = None) -> torch.Tensor:
        """Σ (r̂ − r)² over own training ratings + per-rating L2 on h_u, h_v and the biases (+ the ranking loss).

        An implicit party has no ratings: no squared error and no rating-bias L2, only the ranking loss
        (weighted by its interactions' weights) and the L2 on h.
        `targets`: whose ratings (default the aligned users'; `h_u` rows are that group's users).
        """
        t = targets or self._aligned
        c, prv = self.config, self.private
        if self.data.implicit:
            loss = h_u.new_zeros(())
        else:
            users, items, ratings = t.train
            err = predict(self.public, self.private, h_u, h_v, users, items, user_bias=t.user_bias) - ratings
            loss = (err * err).sum()
        ramp = c.reg_factor(self._round or 0)
        if c.reg > 0:
            # on the final representations h (= e^0 for MF) so propagated layers are regularised too
            loss = loss + ramp * c.reg * ((t.user_counts * h_u.pow(2).sum(1)).sum()
                                   + (t.item_counts * h_v.pow(2).sum(1)).sum())
        if c.weight_decay > 0:  # aligned users' e_u^0: the coordinator applies it (it holds them)
            loss = loss + ramp * c.weight_decay * t.decayed.pow(2).sum()
            if self.features is not None and targets is None:  # attribute rows are e^0 rows of this party too
                loss = loss + ramp * c.weight_decay * sum(p.pow(2).sum() for p in self.features.parameters())
        if c.reg_bias > 0 and not self.data.implicit:
            loss = loss + c.reg_bias * ((t.user_counts * t.user_bias.pow(2)).sum()
                                        + (t.item_counts * prv.item_bias.pow(2)).sum())
        if t.rank is not None:
            loss = loss + c.rank_weight * self._rank_loss(h_u, h_v, t)
        return loss

    def _rank_loss(self, h_u: torch.Tensor, h_v: torch.Tensor, targets: _Targets | None = None) -> torch.Tensor:
        """In-party full softmax over own items: no item id, score or count of this party leaves it."""
        t = targets or self._aligned
        assert t.rank is not None
        users, seen, rows, items = t.rank
        weights = None
        if self.data.implicit:  # interaction weights, scaled to mean 1 so the loss has the unweighted scale
            w = t.train[2]
            weights = w / w.mean()
        return softmax_rank_loss(rank_scores(self.private, h_u.index_select(0, users), h_v), seen, rows, items,
                                 weights)

    @torch.no_grad()
    def _metrics(self, h_u: torch.Tensor, h_v: torch.Tensor, *, own: bool = False) -> dict[str, MetricSums]:
        if self.data.implicit:  # no ratings to score: pooled RMSE is over the explicit parties only
            return {name: MetricSums() for name in self._splits}
        out = {}
        bias = self._own.user_bias if own and self._own is not None else None
        for name, (users, items, ratings) in (self._own_splits if own else self._splits).items():
            pred = predict(self.public, self.private, h_u, h_v, users, items, user_bias=bias)
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
        """Private parameters and optimizer state (for resume).

        The private users' rows and optimizer state go under "private_users" with their ids: every
        tensor there has one row per id (erasure cuts a user's row out of it, `services.party.erasure`).
        """
        state: dict[str, object] = {"private": {k: v.detach().clone() for k, v in self.private.state_dict().items()},
                                    "optimizer": copy.deepcopy(self.optimizer.state_dict()), "round": self._round}
        if self.own_users is not None and self._own_optimizer is not None:
            state["private_users"] = {
                "ids": np.array(self.data.private_user_ids, dtype=str),
                "rows": {k: v.detach().clone() for k, v in self.own_users.state_dict().items()},
                "optimizer": copy.deepcopy(self._own_optimizer.state_dict())}
        if self.features is not None and self._feature_optimizer is not None:
            state["features"] = {"rows": {k: v.detach().clone() for k, v in self.features.state_dict().items()},
                                 "optimizer": copy.deepcopy(self._feature_optimizer.state_dict())}
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what `state_dict` returned (private user rows by id: a user gone since is dropped, a new one
        keeps its initial row)."""
        self.private.load_state_dict(state["private"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        own = state.get("private_users")
        if isinstance(own, dict) and self.own_users is not None and self._own_optimizer is not None:
            self._load_own(own)
        feats = state.get("features")
        if isinstance(feats, dict) and self.features is not None and self._feature_optimizer is not None:
            self.features.load_state_dict(feats["rows"])
            self._feature_optimizer.load_state_dict(feats["optimizer"])
        self._round = state["round"]  # type: ignore[assignment]
        self._forward = None

    def _load_own(self, own: dict[str, Any]) -> None:
        """The private users' rows and optimizer state from a checkpoint, matched by id."""
        assert self.own_users is not None and self._own_optimizer is not None
        saved = [str(u) for u in np.asarray(own["ids"]).reshape(-1).tolist()]
        current = self.data.private_user_ids
        rows, opt = dict(own["rows"]), copy.deepcopy(own["optimizer"])
        if saved != current:
            at = {u: k for k, u in enumerate(saved)}
            pairs = [(k, at[u]) for k, u in enumerate(current) if u in at]
            new = torch.tensor([a for a, _ in pairs], dtype=torch.int64)
            old = torch.tensor([b for _, b in pairs], dtype=torch.int64)

            def remap(v: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
                out = base.detach().clone()
                out[new] = v[old].to(out.dtype)
                return out

            params = self.own_users.state_dict()
            rows = {k: remap(v, params[k]) for k, v in rows.items()}
            for entry in opt["state"].values():  # moments start at zero for a user new since the checkpoint
                for k, v in list(entry.items()):
                    if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == len(saved):
                        entry[k] = remap(v, torch.zeros((len(current),) + tuple(v.shape[1:]), dtype=v.dtype))
        self.own_users.load_state_dict(rows)
        self._own_optimizer.load_state_dict(opt)

    def load_warm(self, state: dict[str, object], *, item_rows: np.ndarray) -> None:
        """Start from a previous run's `state_dict`: its item rows copied by `item_rows` (-1: new item, kept fresh)."""
        load_mapped(module=self.private, optimizer=self.optimizer, params=state["private"],  # type: ignore[arg-type]
                    optimizer_state=state.get("optimizer"), rows=item_rows,  # type: ignore[arg-type]
                    by_row={k for k, _ in self.private.named_parameters()})
        own = state.get("private_users")  # the party's private users, matched by id (a new one keeps its fresh row)
        if isinstance(own, dict) and self.own_users is not None and self._own_optimizer is not None:
            self._load_own(own)

    def serving_model(self) -> dict[str, np.ndarray]:
        """Final h_u (aligned users, then the private users), h_v (own items) and biases from the latest
        completed forward."""
        if self._last is None:
            raise ProtocolError(f"party {self.party_id}: no completed round to serve")
        h_u, h_v = self._last
        users = h_u.numpy()
        if self._last_own is not None:  # the private users' rows follow the aligned ones (PartyData's order)
            users = np.concatenate([users, self._last_own[0].numpy()])
        out = {"user_repr": users, "item_repr": h_v.numpy(), "item_bias": self._last_private["item_bias"],
               "rating_dim": np.array(self.arch.rating_dim)}
        if "rank_bias" in self._last_private:
            out["rank_bias"] = self._last_private["rank_bias"]
        if self.arch.use_bias:
            bias = self.public.user_bias.detach().numpy().copy()
            out["user_bias"] = bias if self._last_own is None else np.concatenate([bias, self._last_own[1]])
            out["global_bias"] = self.public.global_bias.detach().numpy().copy()
        return out
