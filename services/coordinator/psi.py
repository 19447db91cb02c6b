"""PSI orchestration: the coordinator relays opaque blinded points around the ring; it never sees ids."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TypeVar

import numpy as np

from services.coordinator.client import PartyClient
from services.crypto.psi import intersect_tokens, ring_owner
from services.errors import ProtocolError
from services.protocol.federation import decode_points, encode_points, pack_tree


def _points(data: bytes, party_id: str) -> list[bytes]:
    try:
        return decode_points(data)
    except ProtocolError as exc:
        raise ProtocolError(f"party {party_id} sent a malformed PSI list: {exc.detail}") from exc


T = TypeVar("T")


def _each(pool: Executor | None, names: Sequence[str], call: Callable[[str], T]) -> dict[str, T]:
    """`call` for every party, at once on `pool` (in order without one); the first failure, in name order, is raised."""
    if pool is None:
        return {p: call(p) for p in names}
    # each call runs in a copy of the caller's context, so the request id bound there goes along
    futures = {p: pool.submit(contextvars.copy_context().run, call, p) for p in names}
    return {p: futures[p].result() for p in names}


def align_users(*, clients: Mapping[str, PartyClient], run_id: str, pool: Executor | None = None) -> int:
    """Run multi-party ECDH-PSI through the parties; returns the size of the user intersection.

    Each step asks every party at once on `pool`: a party's EC operations over millions of ids take
    minutes, and the parties compute on their own machines (one after another, PSI would take the sum).
    """
    names = sorted(clients)
    lists = _each(pool, names, lambda p: _points(clients[p].psi_start(run_id=run_id), p))
    for step in range(1, len(names)):
        owners = {reblinder: ring_owner(names, reblinder=reblinder, step=step) for reblinder in names}

        def reblind(reblinder: str, owners: dict[str, str] = owners,
                    current: dict[str, list[bytes]] = lists) -> list[bytes]:
            owner = owners[reblinder]
            answer = _points(clients[reblinder].psi_reblind(run_id=run_id, points=encode_points(current[owner])),
                             reblinder)
            if len(answer) != len(current[owner]):
                raise ProtocolError(f"party {reblinder} changed the length of a PSI list")
            return answer

        lists = {owners[r]: answer for r, answer in _each(pool, names, reblind).items()}
    common = intersect_tokens(lists)
    common_arr = np.frombuffer(b"".join(common), dtype=np.uint8)

    def finish(p: str) -> int:
        body = pack_tree({"own": np.frombuffer(b"".join(lists[p]), dtype=np.uint8), "intersection": common_arr})
        return clients[p].psi_finish(run_id=run_id, body=body)

    sizes = set(_each(pool, names, finish).values())
    if sizes != {len(common)}:
        raise ProtocolError(f"parties disagree on the intersection size: {sorted(sizes)} vs {len(common)}")
    return len(common)
