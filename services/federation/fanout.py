"""fan_out: one call on every target, in parallel, failures as data (training steps and serving alike)."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, wait
from typing import TypeVar

from services.errors import DomainError, PartyUnavailable

T = TypeVar("T")
L = TypeVar("L")


def fan_out(
    pool: Executor | None, targets: Mapping[str, L], call: Callable[[L], T], *, deadline_s: float | None = None,
) -> tuple[dict[str, T], dict[str, str]]:
    """Run `call` on every target (in parallel on `pool`, in id order without one); failures are data, never raised.

    With `deadline_s` (and a pool), a target whose call has not returned that many seconds after the
    fan-out began is a failure (`party_unavailable`); the others' results are kept.
    """
    jobs = sorted(targets.items())
    # Each job runs in a copy of the caller's context, so the request id bound there goes along.
    futures = {pid: pool.submit(contextvars.copy_context().run, call, t) for pid, t in jobs} if pool is not None else {}
    end = time.monotonic() + deadline_s if deadline_s is not None else None
    results: dict[str, T] = {}
    failures: dict[str, str] = {}
    for pid, target in jobs:
        if end is not None and pid in futures and not wait([futures[pid]], timeout=max(0.0, end - time.monotonic()))[0]:
            futures[pid].cancel()  # not started yet: never runs; running: its own request timeout ends it
            failures[pid] = f"{PartyUnavailable.code}: no answer within {deadline_s:g}s"
            continue
        try:
            results[pid] = futures[pid].result() if pool is not None else call(target)
        except DomainError as exc:
            failures[pid] = f"{exc.code}: {exc.detail}"
        except Exception as exc:  # noqa: BLE001 - a party's bad answer must not stop the round
            failures[pid] = f"{type(exc).__name__}: {exc}"
    return results, failures
