"""A FedPerGNN party (vertical): trains on its graph expanded with the other parties' individual item embeddings.

Per round: `expansion_upload` (own e_v^0 under pseudonyms + edges, to the relay) →
`receive_expansion` (the other parties' items as anonymous rows) → `begin` (public parameters) →
`finish`: the same GNN as VerFedGNN runs on the expanded graph (own items trainable, foreign
items constant, exact degrees, so no projection and no degree estimate), the loss is the party's
own training ratings, private items take a step, and the public-parameter gradients leave with
FedPerGNN's protection: × grad_scale, clipped to [−δ, δ] plus Laplace(λ) noise per element, and
per-user rows uploaded for real rows plus pseudo rows drawn like real ones.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from models.graph import BipartiteGraph
from models.vertical import PartyForward
from services.errors import ProtocolError
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.ldp import ldp_perturb, pseudo_rows
from services.fedpergnn.messages import (
    PER_USER,
    ExpansionDownload,
    ExpansionUpload,
    LdpUpload,
    item_tokens,
)
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.types import MetricSums, PartyData, party_number

_LDP_TAG = 7_2022  # separates the LDP noise stream from the engine's other seeded streams


class FedPerGNNParty(PartyTrainer):
    """PartyTrainer's data, private items, loss and metrics; graph expansion and LDP instead of projection."""

    def __init__(self, *, config: FedPerGNNConfig, data: PartyData, seed: int, key: bytes | None = None) -> None:
        super().__init__(config=config.train, data=data, seed=seed)
        self.fed_config = config
        self.key = key if key is not None else os.urandom(32)  # never leaves the party
        self._foreign: ExpansionDownload | None = None
        self._expanded: BipartiteGraph | None = None

    # ---- graph expansion --------------------------------------------------------------------
    def expansion_upload(self, *, round_index: int) -> ExpansionUpload:
        """Own items' current e_v^0 under fresh pseudonyms (rows shuffled) and the (user, pseudonym) edges."""
        tokens = item_tokens(self.key, round_index=round_index, n_items=self.data.n_items)
        # row and edge order must not give away the item index order either
        rng = np.random.default_rng([round_index, *np.frombuffer(self.key, dtype=np.uint32).tolist()])
        order = rng.permutation(self.data.n_items)
        emb = self.private.item_emb.detach().numpy()
        g = self.graph
        edges = rng.permutation(g.n_edges)
        return ExpansionUpload(self.party_id, round_index, tokens[order], np.ascontiguousarray(emb[order]),
                               g.users.numpy()[edges], tokens[g.items.numpy()[edges]])

    def receive_expansion(self, download: ExpansionDownload) -> None:
        """Keep the foreign rows and build the expanded graph (own items first, then foreign rows)."""
        if download.embeddings.ndim != 2 or download.embeddings.shape[1] != self.arch.dim:
            raise ProtocolError(f"expansion rows have shape {download.embeddings.shape}")
        n_foreign = download.embeddings.shape[0]
        if download.edge_rows.size and (download.edge_rows.min() < 0 or download.edge_rows.max() >= n_foreign):
            raise ProtocolError("an expansion edge names a row that was not sent")
        g = self.graph
        users = torch.cat([g.users, torch.from_numpy(download.edge_users)])
        items = torch.cat([g.items, torch.from_numpy(download.edge_rows) + self.data.n_items])
        self._expanded = BipartiteGraph.from_edges(users, items, n_users=self.data.n_users,
                                                   n_items=self.data.n_items + n_foreign)
        self._foreign = download

    # ---- round ----------------------------------------------------------------------------------
    def begin(self, *, round_index: int, public: dict[str, np.ndarray]) -> None:
        """Load the public parameters and run the forward over the expanded graph."""
        if self._expanded is None or self._foreign is None:
            raise ProtocolError(f"party {self.party_id}: no graph expansion received")
        self.begin_round(round_index=round_index, public=public)
        fwd = PartyForward(public=self.public, private=self.private, graph=self._expanded, scale=1.0)
        # foreign rows are constants appended after the party's own (trainable) item embeddings
        fwd.items = [torch.cat([self.private.item_emb, torch.from_numpy(self._foreign.embeddings)])]
        for layer in range(fwd.n_layers):
            fwd.contribution(layer)
            fwd.advance(layer, None)
        self._forward = fwd

    def finish(self) -> LdpUpload:
        """Loss on own ratings, private step, LDP-protected public gradients, metric sums."""
        fwd = self._require()
        h_u, h_v_all = fwd.final()
        h_v = h_v_all[: self.data.n_items]
        loss = self._loss(h_u, h_v)
        loss.backward()
        metrics = self._metrics(h_u.detach(), h_v.detach())
        self.optimizer.step()
        self._last = (h_u.detach(), h_v.detach())
        grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
                 for name, p in self.public.named_parameters()}
        self._forward = None
        return self._protect_ldp(grads, loss=float(loss.detach()), metrics=metrics)

    def _protect_ldp(self, grads: dict[str, np.ndarray], *, loss: float, metrics: dict[str, MetricSums]) -> LdpUpload:
        """× grad_scale; per-user rows: real rows + pseudo rows; clip + Laplace on every element (when on)."""
        assert self._round is not None
        c = self.fed_config
        gs = np.float32(c.train.grad_scale)
        rows_all = np.concatenate([grads[k].reshape(self.data.n_users, -1) for k in PER_USER], axis=1) * gs
        shared = {k: v * gs for k, v in grads.items() if k not in PER_USER}
        real = np.flatnonzero(np.any(rows_all != 0, axis=1))
        if not c.use_ldp:  # privacy off: the real rows, as they are
            return self._upload(real, rows_all[real], shared, loss, metrics)
        rng = np.random.default_rng([self.seed, party_number(self.party_id), self._round, _LDP_TAG])
        idle = np.setdiff1d(np.arange(self.data.n_users), real)
        pseudo = np.sort(rng.choice(idle, size=min(c.n_pseudo, idle.size), replace=False)) if real.size else idle[:0]
        rows = np.concatenate([real, pseudo])
        values = np.concatenate([rows_all[real], pseudo_rows(rows_all[real], pseudo.size, rng=rng)])
        order = np.argsort(rows, kind="stable")
        noisy = ldp_perturb(values[order], clip=c.ldp_clip, scale=c.ldp_scale, rng=rng)
        shared = {k: ldp_perturb(v, clip=c.ldp_clip, scale=c.ldp_scale, rng=rng) for k, v in sorted(shared.items())}
        return self._upload(rows[order], noisy, shared, loss, metrics)

    def _upload(self, rows: np.ndarray, values: np.ndarray, shared: dict[str, np.ndarray], loss: float,
                metrics: dict[str, MetricSums]) -> LdpUpload:
        dim = self.arch.dim
        per_user = {"user_emb": np.ascontiguousarray(values[:, :dim], dtype=np.float32),
                    "user_bias": np.ascontiguousarray(values[:, dim], dtype=np.float32)}
        assert self._round is not None
        return LdpUpload(self.party_id, self._round, loss, rows.astype(np.int64), per_user,
                         {k: np.asarray(v, dtype=np.float32) for k, v in shared.items()}, metrics)
