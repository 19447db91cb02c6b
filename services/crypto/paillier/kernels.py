"""Inner loops of the fast Paillier path on raw gmpy2 integers, and their worker pool.

Everything here works on raw ciphertexts mod n^2 (phe's g = n + 1 convention, so the
encryption of m with randomness r^n is (1 + m*n) * r^n mod n^2). Kernels take a
`FastCore` first; in pool workers the core is the fork-inherited global `_CORE`, so the
16-64 MB fixed-base table is never pickled. Python-level loops hold the GIL, hence a
fork-based process pool (threads do not scale them: measured 5.5 vs 5.0 us/mulmod).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.pool import Pool
from typing import Any

import gmpy2
from gmpy2 import mpz

_CORE: FastCore | None = None


@dataclass(frozen=True)
class FastCore:
    """Public-key material for the kernels: n, n^2 and the DJN fixed-base table of h_s."""

    n: Any
    n2: Any
    window: int
    exp_bits: int
    table: list

    def table_pow(self, a: int) -> Any:
        """h_s^a mod n^2 from the table: one mulmod per non-zero window of a."""
        tab, n2, acc = self.table, self.n2, None
        if self.window == 8:
            digits: Sequence[int] = a.to_bytes(len(tab), "little")
        else:
            mask = (1 << self.window) - 1
            digits = [(a >> (self.window * i)) & mask for i in range(len(tab))]
        for row, v in zip(tab, digits):
            if v:
                acc = row[v] if acc is None else acc * row[v] % n2
        return mpz(1) if acc is None else acc


def build_table(h_s: Any, n2: Any, exp_bits: int, window: int) -> list:
    """table[i][v] = h_s^(v * 2^(window*i)) mod n^2 for v < 2^window (table[i][0] = 1)."""
    table = []
    base = mpz(h_s)
    for _ in range(-(-exp_bits // window)):
        row = [mpz(1), base]
        for _ in range(2, 1 << window):
            row.append(row[-1] * base % n2)
        table.append(row)
        base = row[-1] * base % n2
    return table


# ----------------------------------------------------------------------------- kernels


def k_random_factors(core: FastCore, exps: list[int]) -> list:
    """Fresh n-th residues h_s^a for the given exponents."""
    return [core.table_pow(a) for a in exps]


def k_encrypt(core: FastCore, residues: list[int], exps: list[int]) -> list:
    """(1 + m*n) * r mod n^2 = r + n*(m*r mod n) mod n^2, with r = h_s^a (m in [0, n))."""
    n, n2 = core.n, core.n2
    out = []
    for m, a in zip(residues, exps):
        r = core.table_pow(a)
        c = r + n * (m * r % n)
        out.append(c - n2 if c >= n2 else c)
    return out


def k_rerandomize(core: FastCore, cts: list, exps: list[int]) -> list:
    """c * h_s^a mod n^2: same plaintext, fresh randomness."""
    n2 = core.n2
    return [c * core.table_pow(a) % n2 for c, a in zip(cts, exps)]


def _slot_plan(terms: list[tuple[int, int]]) -> tuple[int, int, list[list[tuple[int, bool]]]]:
    """(tz, w, steps): exponents |e| = e' * 2^tz with e' < 2^w; steps[t] = bases with bit set."""
    if not terms:
        return 0, 0, []
    tz = min((abs(e) & -abs(e)).bit_length() - 1 for _, e in terms)
    reduced = [(j, abs(e) >> tz, e < 0) for j, e in terms]
    width = max(e.bit_length() for _, e, _ in reduced)
    steps = [[(j, neg) for j, e, neg in reduced if (e >> t) & 1] for t in range(width - 1, -1, -1)]
    return tz, width, steps


def k_pack_rows(core: FastCore, slot_terms: list[list[tuple[int, int]]], bases: list[list],
                slot_bits: int) -> list:
    """Packed left products for one block of rows and a chunk of columns.

    out[k] = prod_s ( prod_j bases[j][k]^e_sj )^(2^(W*s)), i.e. slot s holds
    sum_j e_sj * x_jk. Horner from the top slot, all columns at once (one GIL-free
    powmod_base_list per shift). The odd parts of the weights e_sj are interleaved into
    the last squarings of each W-bit shift (Straus), so weights cost only
    multiplications; their common power of two is one more shift. Negative weights use
    inverted bases.
    """
    n2 = core.n2
    ncols = len(bases[0]) if bases else 0
    inv: dict[int, list] = {}
    for terms in slot_terms:
        for j, e in terms:
            if e < 0 and j not in inv:
                inv[j] = [gmpy2.invert(x, n2) for x in bases[j]]
    accs: list = [mpz(1)] * ncols
    started = False
    for terms in reversed(slot_terms):
        tz, width, steps = _slot_plan(terms)
        if slot_bits < tz + width:
            raise ValueError("slot narrower than a left weight")
        if started and slot_bits - tz - width:
            accs = gmpy2.powmod_base_list(accs, 1 << (slot_bits - tz - width), n2)
        for step in steps:
            if started:
                accs = [a * a % n2 for a in accs]
            for j, neg in step:
                src = inv[j] if neg else bases[j]
                accs = [a * x % n2 for a, x in zip(accs, src)] if started else list(src)
                started = True
        if started and tz:
            accs = gmpy2.powmod_base_list(accs, 1 << tz, n2)
    return accs


def k_right_multiply(core: FastCore, blocks: list[list], plan: list[list[list[tuple[int, int]]]],
                     window: int, n_windows: int, offset: int, noise: list[list[int]],
                     exps: list[list[int]]) -> list[list]:
    """Right product, sign offset, plaintext noise and re-randomisation for several blocks.

    For each block with bases P_k: out_l = prod_k P_k^(N_kl + offset) * (prod_k P_k)^(-offset)
    * (1 + n * noise_l) * h_s^(a_l). prod_k P_k^(E_kl) is a bucket multi-exponentiation:
    Q_kj = P_k^(2^(window*j)) is shared by all outputs; plan[l][v-1] lists the (k, j) whose
    window digit is v; sum_v v*B_v uses the running-product trick (2 mulmods per bucket).
    """
    n, n2 = core.n, core.n2
    results = []
    for bases, noise_b, exps_b in zip(blocks, noise, exps):
        q = []
        for p in bases:
            row = [p]
            for _ in range(1, n_windows):
                row.append(gmpy2.powmod(row[-1], 1 << window, n2))
            q.append(row)
        correction = mpz(1)
        if offset:
            total = mpz(1)
            for p in bases:
                total = total * p % n2
            correction = gmpy2.powmod(gmpy2.invert(total, n2), offset, n2)
        outs = []
        for buckets, m, a in zip(plan, noise_b, exps_b):
            running = res = None
            for pairs in reversed(buckets):  # digit values high -> low
                b = None
                for k, j in pairs:
                    b = q[k][j] if b is None else b * q[k][j] % n2
                if b is not None:
                    running = b if running is None else running * b % n2
                if running is not None:
                    res = running if res is None else res * running % n2
            acc = correction if res is None else res * correction % n2
            acc = acc * ((m * n + 1) % n2) % n2
            outs.append(acc * core.table_pow(a) % n2)
        results.append(outs)
    return results


# ----------------------------------------------------------------------------- pool


def _init_worker(core: FastCore) -> None:
    global _CORE
    _CORE = core


def _dispatch(name: str, args: tuple) -> tuple[Any, float]:
    assert _CORE is not None, "worker core not initialised"
    start = time.process_time()
    out = _KERNELS[name](_CORE, *args)
    return out, time.process_time() - start


_KERNELS: dict[str, Callable[..., Any]] = {
    "random_factors": k_random_factors,
    "encrypt": k_encrypt,
    "rerandomize": k_rerandomize,
    "pack_rows": k_pack_rows,
    "right_multiply": k_right_multiply,
}


class Engine:
    """Runs kernels inline (workers=1) or on a fork-based process pool sharing the table."""

    def __init__(self, core: FastCore, workers: int) -> None:
        self.core = core
        self.workers = max(1, workers)
        self._pool: Pool | None = None
        self._lock = threading.Lock()
        self.worker_cpu = 0.0  # CPU seconds spent in kernels (benchmarks read it)

    def _get_pool(self) -> Pool:
        with self._lock:  # callers may share one context across request threads
            if self._pool is None:
                ctx = multiprocessing.get_context("fork")
                pool = ctx.Pool(self.workers, initializer=_init_worker, initargs=(self.core,))
                weakref.finalize(self, pool.terminate)
                self._pool = pool
            return self._pool

    def submit(self, name: str, args: tuple) -> Callable[[], Any]:
        """Queue one kernel call; returns a getter (inline when workers == 1)."""
        if self.workers == 1:  # inline: the caller's own CPU time already counts it
            out = _KERNELS[name](self.core, *args)
            return lambda: out
        handle = self._get_pool().apply_async(_dispatch, (name, args))

        def get() -> Any:
            out, cpu = handle.get()
            self.worker_cpu += cpu
            return out
        return get

    def map(self, name: str, tasks: list[tuple]) -> list:
        """Run kernel `name` on each argument tuple; results in task order."""
        getters = [self.submit(name, t) for t in tasks]
        return [g() for g in getters]

    def map_flat(self, name: str, columns: Sequence[Sequence[Any]], *, chunks: int = 0) -> list:
        """Split parallel argument lists into ~chunks pieces, run `name`, concatenate results."""
        total = len(columns[0])
        pieces = chunks or (self.workers * 32 if self.workers > 1 else 1)
        step = max(1, -(-total // pieces))
        tasks = [tuple(list(col[i:i + step]) for col in columns) for i in range(0, total, step)]
        return [x for part in self.map(name, tasks) for x in part]

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        with self._lock:
            if self._pool is not None:
                self._pool.terminate()
                self._pool = None
