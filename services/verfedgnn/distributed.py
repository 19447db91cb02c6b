"""One party's VerFedGNN training over W worker processes on torch.distributed (PARTY_TRAIN_WORKERS).

The party's users (and their ratings, edges and columns of Φ) are cut into W contiguous blocks, one
per rank. Rank 0 lives in the party's federation process, answers the coordinator's steps and drives
the other ranks: before each step it broadcasts the step (and scatters the public user rows), then
every rank runs the same `PartyTrainer` step on its block. Sums that span blocks go through
torch.distributed collectives: item-side aggregations (differentiable all-reduce), Φ X = Σ_w Φ[:, rows_w]
X[rows_w], the gradients of the private item parameters and of the shared public parameters, the loss
and the metric sums. Rank 0 then clips and quantizes the summed gradients with the party's own RNG, so
the messages on the wire are those of W = 1 (up to float summation order).

Workers are spawned here (ranks 1..local_workers) or started on other machines with
`python -m services.verfedgnn.distributed --rank R --world-size W --master HOST:PORT`. Every wait is a
collective with the group's timeout: a worker with no step for `timeout_s` (the run ended or was
cancelled, or rank 0 died) leaves, and rank 0 starts a fresh group at its next step.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from services.crypto.projection import ProjectionSpec, _blocks, _gaussian_block, _sparse_block
from services.errors import ProtocolError
from services.federation.cluster import Cluster as Cluster  # the runtime's placement, re-exported
from services.verfedgnn.config import TrainConfig, shared_projection
from services.verfedgnn.party import PartyTrainer, sample_valid_users
from services.verfedgnn.types import SPLITS, GradientUpload, MetricSums, PartyData, RatingTriples

log = logging.getLogger(__name__)

ROW_PARAMS = ("user_emb", "user_bias")  # public parameters with one row per user: sharded, not reduced
_DENSE_PHI_LIMIT = 20_000_000  # q·n_w entries below which a Gaussian Φ block of columns is kept dense
_ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 120.0  # rendezvous deadline: every rank must have joined within this (or the group's timeout if longer)


def shard_bounds(n: int, workers: int, rank: int) -> tuple[int, int]:
    """Users [lo, hi) of `rank`: contiguous blocks of near-equal size."""
    return rank * n // workers, (rank + 1) * n // workers


def _triples(t: RatingTriples, lo: int, hi: int) -> RatingTriples:
    # splits are sorted by user (build_party_data), so a block of users is a slice
    a, b = np.searchsorted(t.users, [lo, hi])
    if not np.all(np.diff(t.users) >= 0):  # not sorted: select
        m = (t.users >= lo) & (t.users < hi)
        return RatingTriples(t.users[m] - lo, t.items[m], t.ratings[m])
    return RatingTriples(t.users[a:b] - lo, t.items[a:b], t.ratings[a:b])


def shard_data(data: PartyData, lo: int, hi: int) -> PartyData:
    """The party's data restricted to users [lo, hi), user indices re-based to 0."""
    return dataclasses.replace(data, n_users=hi - lo, train=_triples(data.train, lo, hi),
                               valid=_triples(data.valid, lo, hi), test=_triples(data.test, lo, hi))


class _AllReduceSum(torch.autograd.Function):
    """Σ over ranks; its backward all-reduces the incoming gradient, so Σ_w loss_w is what is differentiated."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x.detach().clone().contiguous()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        out = grad.detach().clone().contiguous()
        dist.all_reduce(out)
        return out


class CollectiveReducer:
    """Item-side sums over every rank's users (models.graph.ItemReducer)."""

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """All-reduce with autograd: the backward all-reduces the gradient, so Σ_w loss_w is differentiated."""
        out: torch.Tensor = _AllReduceSum.apply(x)
        return out

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise max over ranks (a softmax shift: no gradient)."""
        out = x.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return out


class PhiColumns:
    """Columns [lo, hi) of the shared Φ, regenerated from the same seeded blocks as services.crypto.projection."""

    def __init__(self, spec: ProjectionSpec, lo: int, hi: int) -> None:
        self.spec, self.lo, self.hi = spec, lo, hi
        self._blocks = [(j, a, b) for j, a, b in _blocks(spec) if b > lo and a < hi]
        self.dense: torch.Tensor | None = None
        self.sparse: tuple[torch.Tensor, torch.Tensor] | None = None
        if spec.kind == "sparse":
            self.sparse = self._sparse()
        elif spec.q * (hi - lo) <= _DENSE_PHI_LIMIT:
            self.dense = torch.cat([blk for blk, _, _ in self._gaussian()], dim=1) if hi > lo else \
                torch.zeros(spec.q, 0)

    def _gaussian(self) -> Iterator[tuple[torch.Tensor, int, int]]:
        """(columns, first row of X, end row of X) of each block clipped to [lo, hi)."""
        for j, a, b in self._blocks:
            s, e = max(a, self.lo), min(b, self.hi)
            yield torch.from_numpy(_gaussian_block(self.spec, j, b - a)[:, s - a:e - a]), s - self.lo, e - self.lo

    def _sparse(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
        for j, a, b in self._blocks:
            r, sg = _sparse_block(self.spec, j, b - a)
            s, e = max(a, self.lo), min(b, self.hi)
            r, sg = r[s - a:e - a], sg[s - a:e - a]
            rows.append(r.ravel())
            cols.append(np.repeat(np.arange(s - self.lo, e - self.lo, dtype=np.int64), r.shape[1]))
            vals.append(sg.ravel().astype(np.float32) / np.float32(np.sqrt(r.shape[1])))
        r_t, c_t = torch.from_numpy(np.concatenate(rows)), torch.from_numpy(np.concatenate(cols))
        v_t = torch.from_numpy(np.concatenate(vals))
        n = self.hi - self.lo
        phi = torch.sparse_coo_tensor(torch.stack([r_t, c_t]), v_t, (self.spec.q, n), check_invariants=False)
        phi_t = torch.sparse_coo_tensor(torch.stack([c_t, r_t]), v_t, (n, self.spec.q), check_invariants=False)
        with warnings.catch_warnings():  # "sparse CSR is beta" is noise here
            warnings.simplefilter("ignore")
            return phi.coalesce().to_sparse_csr(), phi_t.coalesce().to_sparse_csr()

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Φ[:, lo:hi] X[lo:hi] (q, D): this rank's share of Φ X."""
        if self.dense is not None:
            return self.dense @ x
        if self.sparse is not None:
            return torch.sparse.mm(self.sparse[0], x)
        out = torch.zeros(self.spec.q, x.shape[1])
        for blk, s, e in self._gaussian():
            out += blk @ x[s:e]
        return out

    def reconstruct(self, y: torch.Tensor) -> torch.Tensor:
        """Rows lo..hi of Φᵀ Y."""
        if self.dense is not None:
            return self.dense.T @ y
        if self.sparse is not None:
            return torch.sparse.mm(self.sparse[1], y)
        return torch.cat([blk.T @ y for blk, _, _ in self._gaussian()], dim=0)


def _flat_reduce(tensors: list[torch.Tensor], *, root_only: bool) -> list[torch.Tensor]:
    """Sum same-shaped tensors over ranks in one collective (to rank 0 only, or to every rank)."""
    flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors] or [torch.zeros(0)])
    if root_only:
        dist.reduce(flat, dst=0)
    else:
        dist.all_reduce(flat)
    out, pos = [], 0
    for t in tensors:
        out.append(flat[pos:pos + t.numel()].reshape(t.shape))
        pos += t.numel()
    return out


class ShardTrainer(PartyTrainer):
    """A PartyTrainer over one block of users whose cross-block sums are collectives of the default group.

    Item parameters are replicated (every rank steps them with the summed gradient); the item-only
    terms of the loss (item L2 and bias terms, weight decay) count once, at rank 0.
    """

    def __init__(self, *, config: TrainConfig, data: PartyData, seed: int, local_seed: int | None,
                 n_users: int, lo: int) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.n_total, self.lo = n_users, lo
        local = config if self.rank == 0 else config.model_copy(update={"weight_decay": 0.0})
        super().__init__(config=local, data=data, seed=seed, local_seed=local_seed)
        degree = self.graph.item_degree.clone()
        dist.all_reduce(degree)  # N_v counts every user's edges
        self.graph = dataclasses.replace(self.graph, item_degree=degree, reducer=CollectiveReducer())
        counts = self._item_counts.clone()
        dist.all_reduce(counts)
        self._item_counts = counts if self.rank == 0 else torch.zeros_like(counts)
        self._phi_cols: PhiColumns | None = None
        self.saving: AbstractContextManager[None] | None = None  # activation accounting (benchmarks only)
        self.optimizer.register_step_pre_hook(lambda *_: self._reduce_private_grads())

    def _valid_users(self, eligible: np.ndarray) -> np.ndarray:
        """This block's share of the party's validation ranking sample, drawn over every block's users, so
        the party ranks the users it would rank at W = 1."""
        mask = torch.zeros(self.n_total, dtype=torch.int64)
        mask[torch.from_numpy(eligible + self.lo)] = 1
        dist.all_reduce(mask)
        chosen = sample_valid_users(np.flatnonzero(mask.numpy()), party_id=self.party_id)
        return chosen[(chosen >= self.lo) & (chosen < self.lo + self.data.n_users)] - self.lo

    def _reduce_private_grads(self) -> None:
        """Before the private step: every rank gets the summed gradient (None only where no rank has one)."""
        params = list(self.private.parameters())
        has = torch.tensor([0.0 if p.grad is None else 1.0 for p in params], dtype=torch.float64)
        dist.all_reduce(has)
        grads = _flat_reduce([torch.zeros_like(p) if p.grad is None else p.grad for p in params], root_only=False)
        for p, g, h in zip(params, grads, has.tolist()):
            p.grad = g if h > 0 else None

    # ---- Φ by columns ------------------------------------------------------------------------
    def _projection(self) -> ProjectionSpec:
        if self._spec is None:
            self._spec = shared_projection(self.config, self.n_total)
            self._phi_cols = PhiColumns(self._spec, self.lo, self.lo + self.data.n_users)
        return self._spec

    def _project(self, x: torch.Tensor) -> np.ndarray:
        self._projection()
        assert self._phi_cols is not None
        y = self._phi_cols.project(x).contiguous()
        dist.reduce(y, dst=0)
        return y.numpy()

    def _reconstruct(self, y: np.ndarray) -> torch.Tensor:
        self._projection()
        assert self._phi_cols is not None
        return self._phi_cols.reconstruct(torch.from_numpy(y))

    # ---- steps -----------------------------------------------------------------------------
    def layer_projection(self, *, layer: int) -> np.ndarray:
        """Φ X^k summed over ranks (rank 0), or X^k's rows gathered at rank 0 without projection."""
        out = super().layer_projection(layer=layer)
        if not self.config.use_projection:
            out = rows_to_root(torch.from_numpy(out), self.n_total).numpy()
        return out

    def receive_projection_sum(self, *, layer: int, others: np.ndarray) -> None:
        """`others` is meaningful at rank 0 only: broadcast (projected) or scattered by rows (raw)."""
        if self.config.use_projection:
            y = torch.from_numpy(np.ascontiguousarray(others, np.float32)) if self.rank == 0 else \
                torch.empty(shared_projection(self.config, self.n_total).q, self.arch.dim)
            dist.broadcast(y, src=0)
            mine = y.numpy()
        else:
            mine = rows_from_root(torch.from_numpy(others) if self.rank == 0 else None, self.n_total,
                                  (self.arch.dim,)).numpy()
        super().receive_projection_sum(layer=layer, others=mine)

    def _protect(self, grads: dict[str, np.ndarray], *, loss: float,
                 metrics: dict[str, MetricSums]) -> GradientUpload:
        """Sum gradients, loss and metric sums over ranks; rank 0 protects them exactly as at W = 1."""
        shared = [k for k in grads if k not in ROW_PARAMS]
        summed = _flat_reduce([torch.from_numpy(np.ascontiguousarray(grads[k])) for k in shared], root_only=True)
        full = {k: rows_to_root(torch.from_numpy(np.ascontiguousarray(grads[k])), self.n_total).numpy()
                if k in ROW_PARAMS else np.zeros(0) for k in grads}
        for k, g in zip(shared, summed):
            full[k] = g.numpy().astype(np.float32, copy=False)
        sums = torch.tensor([[m.sse, m.sae, m.count, m.ndcg, m.ranked]
                             for m in (self.last_metrics[s] for s in SPLITS)]
                            + [[loss, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
        dist.reduce(sums, dst=0)
        self.last_metrics = {s: MetricSums(float(sums[i, 0]), float(sums[i, 1]), int(sums[i, 2]),
                                           float(sums[i, 3]), int(sums[i, 4])) for i, s in enumerate(SPLITS)}
        metrics = {k: self.last_metrics[k] for k in metrics}
        if self.rank != 0:
            return GradientUpload(self.party_id, self._round or 0, 0.0)
        return super()._protect(full, loss=float(sums[-1, 0]), metrics=metrics)

    def serving_rows(self) -> dict[str, np.ndarray]:
        """The serving arrays with h_u and b_u gathered at rank 0 (other ranks: their rows)."""
        sm = super().serving_model()
        sm["user_repr"] = rows_to_root(torch.from_numpy(sm["user_repr"]), self.n_total).numpy()
        if "user_bias" in sm:
            sm["user_bias"] = rows_to_root(torch.from_numpy(sm["user_bias"]), self.n_total).numpy()
        return sm


def rows_to_root(x: torch.Tensor, n: int) -> torch.Tensor:
    """Rank 0 receives every rank's block of rows (rows [lo_w, hi_w)); other ranks get their own back."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x = x.contiguous()
    if rank != 0:
        dist.send(x, dst=0)
        return x
    out = torch.empty((n, *x.shape[1:]), dtype=x.dtype)
    for r in range(world):
        lo, hi = shard_bounds(n, world, r)
        if r == 0:
            out[lo:hi] = x
        else:
            buf = torch.empty((hi - lo, *x.shape[1:]), dtype=x.dtype)
            dist.recv(buf, src=r)
            out[lo:hi] = buf
    return out


def rows_from_root(full: torch.Tensor | None, n: int, tail: tuple[int, ...]) -> torch.Tensor:
    """Each rank receives its block of rows of rank 0's `full` (n, *tail)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    lo, hi = shard_bounds(n, world, rank)
    if rank != 0:
        buf = torch.empty((hi - lo, *tail), dtype=torch.float32)
        dist.recv(buf, src=0)
        return buf
    assert full is not None
    for r in range(1, world):
        a, b = shard_bounds(n, world, r)
        dist.send(full[a:b].to(torch.float32).contiguous(), dst=r)
    return full[lo:hi]


# ---- the worker loop: every rank but 0 -------------------------------------------------------------
def _scatter_public(trainer: ShardTrainer, shared: dict[str, np.ndarray], full: dict[str, np.ndarray] | None,
                    shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    public = dict(shared)
    for k in ROW_PARAMS:
        if k in shapes:
            src = torch.from_numpy(np.ascontiguousarray(full[k], np.float32)) if full is not None else None
            public[k] = rows_from_root(src, trainer.n_total, tuple(shapes[k][1:])).numpy()
    return public


def _apply(trainer: ShardTrainer, name: str, args: dict[str, Any],
           full: dict[str, np.ndarray] | None = None, others: np.ndarray | None = None) -> Any:
    """Run one driven step on this rank's trainer (rank 0 passes the full inputs)."""
    if name == "begin":
        public = _scatter_public(trainer, args["shared"], full, args["shapes"])
        trainer.begin_round(round_index=args["round"], public=public)
        if args.get("measure"):
            trainer.saving = count_saved(trainer)
            trainer.saving.__enter__()
        return None
    if name == "projection":
        return trainer.layer_projection(layer=args["layer"])
    if name == "others":
        dummy = np.zeros(0, np.float32)
        trainer.receive_projection_sum(layer=args["layer"], others=others if others is not None else dummy)
        return None
    if name == "finish":
        try:
            return trainer.finish_round()
        finally:
            if trainer.saving is not None:
                trainer.saving.__exit__(None, None, None)
                trainer.saving = None
    if name == "serving":
        return trainer.serving_rows()
    if name == "ping":
        return None
    if name == "load":
        trainer.load_state_dict(args["state"])
        return None
    if name == "measure":
        report = [None] * trainer.world
        dist.all_gather_object(report, trainer_bytes(trainer))
        return report
    raise ProtocolError(f"unknown distributed step {name!r}")


def worker_main(*, rank: int, world: int, master: str, timeout_s: float) -> int:
    """Join the group, take this rank's block from rank 0, then run steps until told to stop or a wait expires."""
    addr, _, port = master.rpartition(":")
    store = dist.TCPStore(addr, int(port), world, is_master=False,
                          timeout=timedelta(seconds=max(STARTUP_S, timeout_s)))
    store.set(f"joined/{rank}", "1")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    try:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        setup = box[0]
        lo, _ = shard_bounds(setup["n_users"], world, rank)
        part: list[Any] = [None]
        dist.recv_object_list(part, src=0)
        trainer = ShardTrainer(config=setup["config"], data=part[0], seed=setup["seed"],
                               local_seed=setup["local_seed"], n_users=setup["n_users"], lo=lo)
        del part
        while True:
            dist.broadcast_object_list(box, src=0)
            name, args = box[0]
            if name == "stop":
                return 0
            try:
                _apply(trainer, name, args)
            except ProtocolError:  # rank 0 meets the same refusal and answers it
                continue
    except (RuntimeError, dist.DistBackendError) as exc:  # a wait expired or rank 0 went away
        log.warning("training worker %d leaves: %s", rank, str(exc).splitlines()[0] if str(exc) else exc)
        return 0
    finally:
        dist.destroy_process_group()


# ---- rank 0: the party's federation process ---------------------------------------------------------
class _FullShapes:
    """What the step handler asks of `trainer.public`: its config and every parameter's full shape."""

    def __init__(self, shard: ShardTrainer, n_users: int) -> None:
        self.config = shard.public.config
        self._shapes = {k: ((n_users, *v.shape[1:]) if k in ROW_PARAMS else tuple(v.shape))
                        for k, v in shard.public.named_parameters()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Zero-strided float32 arrays of the full shapes (no memory)."""
        return {k: np.broadcast_to(np.float32(0), s) for k, s in self._shapes.items()}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Full shape of every public parameter."""
        return dict(self._shapes)


_ACTIVE: DistributedPartyTrainer | None = None  # torch.distributed's default group is one per process
_ACTIVE_LOCK = threading.RLock()


class DistributedPartyTrainer:
    """PartyTrainer's step interface at rank 0, driving W − 1 workers; the same answers as one PartyTrainer."""

    def __init__(self, *, config: TrainConfig, data: PartyData, seed: int, local_seed: int | None,
                 cluster: Cluster) -> None:
        if cluster.workers > data.n_users:
            raise ProtocolError(f"PARTY_TRAIN_WORKERS={cluster.workers} exceeds the run's {data.n_users} users")
        self.config, self.data, self.seed, self.local_seed = config, data, seed, local_seed
        self.cluster = cluster
        self.party_id = data.party_id
        self._procs: list[subprocess.Popen[bytes]] = []
        self._shard: ShardTrainer | None = None
        self._state: dict[str, object] | None = None  # replicated state to reload into a fresh group
        self._serving: dict[str, np.ndarray] | None = None  # the latest serving arrays, kept when workers leave
        self._last_step = time.monotonic()
        self._start()
        assert self._shard is not None
        self.public: _FullShapes = _FullShapes(self._shard, data.n_users)

    # ---- group lifecycle ---------------------------------------------------------------------
    def _start(self) -> None:
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None and _ACTIVE is not self:
                _ACTIVE.close(keep_serving=True)  # another run's group gives way (it starts again at its next step)
            _ACTIVE = self
            self._spawn()
            self._last_step = time.monotonic()  # idle counts from the group's start (spawning takes a while)
            threading.Thread(target=self._heartbeat, name=f"train-heartbeat-{self.party_id}", daemon=True).start()

    def _heartbeat(self) -> None:
        """Keep idle workers waiting (each wait has the group's deadline); release them once the run is idle."""
        shard = self._shard
        period = max(0.05, min(self.cluster.timeout_s / 4, self.cluster.idle_s / 4))
        while True:
            time.sleep(period)
            with _ACTIVE_LOCK:
                if self._shard is not shard or shard is None:
                    return  # this group closed
                if time.monotonic() - self._last_step > self.cluster.idle_s:
                    self.close(keep_serving=True)
                    return
                try:
                    dist.broadcast_object_list([("ping", {})], src=0)
                except (RuntimeError, dist.DistBackendError):
                    self.close()
                    return

    def _spawn(self) -> None:
        c = self.cluster
        # the store waits for workers to start (imports take seconds) longer than a step may take
        store = dist.TCPStore(c.master_addr, c.master_port, c.workers, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=max(STARTUP_S, c.timeout_s)))
        port = store.port
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        self._procs = [subprocess.Popen([sys.executable, "-m", "services.verfedgnn.distributed", "--rank", str(r),
                                         "--world-size", str(c.workers), "--master", f"{c.master_addr}:{port}",
                                         "--timeout-s", str(c.timeout_s)], env=env, cwd=str(_ROOT))
                       for r in range(1, c.spawned + 1)]
        try:
            store.wait([f"joined/{r}" for r in range(1, c.workers)], timedelta(seconds=max(STARTUP_S, c.timeout_s)))
            dist.init_process_group("gloo", store=store, rank=0, world_size=c.workers,
                                    timeout=timedelta(seconds=c.timeout_s))
            n = self.data.n_users
            dist.broadcast_object_list([{"config": self.config, "seed": self.seed, "local_seed": self.local_seed,
                                         "n_users": n}], src=0)
            for r in range(1, c.workers):
                dist.send_object_list([shard_data(self.data, *shard_bounds(n, c.workers, r))], dst=r)
            self._shard = ShardTrainer(config=self.config, data=shard_data(self.data, *shard_bounds(n, c.workers, 0)),
                                       seed=self.seed, local_seed=self.local_seed, n_users=n, lo=0)
            if self._state is not None:
                self._call("load", {"state": self._state})
        except Exception:
            self.close()
            raise

    def _alive(self) -> bool:
        return self._shard is not None and dist.is_initialized() and all(p.poll() is None for p in self._procs)

    def _ensure(self) -> ShardTrainer:
        """The running group; a fresh one (state reloaded) when its workers left."""
        with _ACTIVE_LOCK:
            if not self._alive():
                self.close()
                self._start()
            assert self._shard is not None
            return self._shard

    def _call(self, name: str, args: dict[str, Any], **inputs: Any) -> Any:
        with _ACTIVE_LOCK:
            if self._shard is None or not self._alive():
                self.close()
                self._start()
            assert self._shard is not None
            self._last_step = time.monotonic()
            try:
                dist.broadcast_object_list([(name, args)], src=0)
                return _apply(self._shard, name, args, **inputs)
            except (RuntimeError, dist.DistBackendError) as exc:
                self.close()
                raise ProtocolError(f"party training workers failed ({str(exc).splitlines()[0]}); retry the "
                                    "round") from exc
            finally:
                self._last_step = time.monotonic()

    def close(self, *, keep_serving: bool = False) -> None:
        """Stop the workers (they leave their loop and exit) and leave the group; idempotent.

        `keep_serving`: first gather the latest serving arrays, so a publish after the workers left still works."""
        with _ACTIVE_LOCK:
            self._close(keep_serving=keep_serving)

    def _close(self, *, keep_serving: bool) -> None:
        global _ACTIVE
        if keep_serving and self._alive() and self._shard is not None and self._shard._last is not None:
            try:
                dist.broadcast_object_list([("serving", {})], src=0)
                self._serving = _apply(self._shard, "serving", {})
            except (RuntimeError, dist.DistBackendError):
                self._serving = None
        if self._shard is not None:
            self._state = self._shard.state_dict()
        if dist.is_initialized() and self._shard is not None:
            try:
                if all(p.poll() is None for p in self._procs):
                    dist.broadcast_object_list([("stop", {})], src=0)
            except (RuntimeError, dist.DistBackendError):
                pass
        if dist.is_initialized() and _ACTIVE is self:
            dist.destroy_process_group()
        for p in self._procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        self._procs, self._shard = [], None
        if _ACTIVE is self:
            _ACTIVE = None

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers spawned here."""
        return [p.pid for p in self._procs]

    # ---- the PartyTrainer interface the step handler uses ----------------------------------------
    def begin_round(self, *, round_index: int, public: dict[str, np.ndarray], measure: bool = False) -> None:
        """Broadcast the shared public parameters and scatter the user rows; every rank opens the round.

        `measure` (benchmarks): every rank records the bytes its forward saves for backward."""
        self._serving = None
        shapes = self.public.shapes()
        shared = {k: np.asarray(v, np.float32) for k, v in public.items() if k not in ROW_PARAMS}
        self._call("begin", {"round": round_index, "shared": shared, "shapes": shapes, "measure": measure},
                   full=public)

    def _forward_at(self, layer: int, *, own: bool) -> None:
        """Refuse an out-of-order step here, before the workers are sent it."""
        shard = self._ensure()
        fwd = shard._forward
        if fwd is None:
            raise ProtocolError(f"party {self.party_id}: no round in progress")
        if layer != len(fwd.users) - 1 or (fwd._own is not None) != own:
            raise ProtocolError(f"layer {layer} out of order")

    def layer_projection(self, *, layer: int) -> np.ndarray:
        """Φ X^k of the whole party, as one PartyTrainer answers it."""
        self._forward_at(layer, own=False)
        return np.asarray(self._call("projection", {"layer": layer}))

    def receive_projection_sum(self, *, layer: int, others: np.ndarray) -> None:
        """The others' aggregate to every rank, then layer k + 1."""
        self._forward_at(layer, own=True)
        self._call("others", {"layer": layer}, others=np.asarray(others, np.float32))

    def finish_round(self) -> GradientUpload:
        """Loss, private step and the protected sum of every rank's gradients."""
        shard = self._ensure()
        fwd = shard._forward
        if fwd is None or len(fwd.users) != fwd.n_layers + 1:
            raise ProtocolError(f"party {self.party_id}: forward is incomplete")
        upload: GradientUpload = self._call("finish", {})
        return upload

    @property
    def last_metrics(self) -> dict[str, MetricSums]:
        """Metric sums of every split over all ranks (latest round)."""
        return self._shard.last_metrics if self._shard is not None else {}

    def state_dict(self) -> dict[str, object]:
        """Private parameters and optimizer state: replicated, so rank 0's copy (or the copy kept at close)."""
        with _ACTIVE_LOCK:
            if self._shard is not None:
                return self._shard.state_dict()
            assert self._state is not None
            return self._state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore every rank."""
        self._state = state
        self._call("load", {"state": state})

    def serving_model(self) -> dict[str, np.ndarray]:
        """Serving arrays with every user's rows (kept from before the workers left, if they did)."""
        with _ACTIVE_LOCK:
            if self._serving is not None and not self._alive():
                return self._serving
            out: dict[str, np.ndarray] = self._call("serving", {})
            return out

    def measure(self) -> list[dict[str, int]]:
        """Bytes of training state held by each rank (`trainer_bytes`)."""
        self._ensure()
        out: list[dict[str, int]] = self._call("measure", {})
        return out


# ---- memory accounting (benchmarks/dist_memory.py) --------------------------------------------------
def _tensor_bytes(t: torch.Tensor, seen: set[int]) -> int:
    if t.layout == torch.sparse_csr:
        return sum(_tensor_bytes(x, seen) for x in (t.crow_indices(), t.col_indices(), t.values()))
    if t.layout == torch.sparse_coo:
        return sum(_tensor_bytes(x, seen) for x in (t._indices(), t._values()))
    storage = t.untyped_storage()
    key = storage.data_ptr()
    if key in seen or key == 0:
        return 0
    seen.add(key)
    return int(storage.nbytes())


def _walk(obj: object, seen: set[int], depth: int = 0) -> int:
    if isinstance(obj, torch.Tensor):
        return _tensor_bytes(obj, seen) + (_tensor_bytes(obj.grad, seen) if obj.grad is not None else 0)
    if isinstance(obj, np.ndarray):
        key = obj.__array_interface__["data"][0]
        if key in seen:
            return 0
        seen.add(key)
        return int(obj.nbytes)
    if depth > 6:
        return 0
    if isinstance(obj, dict):
        return sum(_walk(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_walk(v, seen, depth + 1) for v in obj)
    if isinstance(obj, torch.nn.Module):
        return sum(_walk(p, seen, depth + 1) for p in obj.parameters())
    if isinstance(obj, torch.optim.Optimizer):
        return _walk(list(obj.state.values()), seen, depth + 1)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(_walk(getattr(obj, f.name), seen, depth + 1) for f in dataclasses.fields(obj))
    if isinstance(obj, (PhiColumns,)):
        return _walk([obj.dense, obj.sparse], seen, depth + 1)
    return 0


def trainer_bytes(trainer: PartyTrainer) -> dict[str, int]:
    """Bytes of the tensors a trainer holds (parameters, gradients, optimizer state, graph, Φ, ratings, last
    forward) plus the autograd activations its latest forward saved (`activation_bytes`, when recorded)."""
    seen: set[int] = set()
    held = sum(_walk(v, seen) for k, v in vars(trainer).items() if k not in ("data", "config", "arch"))
    held += _walk(trainer.data, seen)
    saved = int(getattr(trainer, "activation_bytes", 0))
    return {"state_bytes": held, "activation_bytes": saved, "total_bytes": held + saved}


@contextmanager
def count_saved(trainer: PartyTrainer) -> Iterator[None]:
    """Record on `trainer.activation_bytes` the bytes autograd saves for backward inside the block."""
    seen: set[int] = set()
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += _tensor_bytes(t, seen)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield
    trainer.activation_bytes = total[0]  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    """Entry point of a worker rank (spawned by rank 0, or started on another machine)."""
    ap = argparse.ArgumentParser(description="A party training worker (torch.distributed rank > 0).")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0's rendezvous")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not 0 < args.rank < args.world_size:
        print(f"--rank must lie in 1..{args.world_size - 1}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    return worker_main(rank=args.rank, world=args.world_size, master=args.master, timeout_s=args.timeout_s)


if __name__ == "__main__":
    sys.exit(main())
