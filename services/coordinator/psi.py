"""PSI orchestration: the coordinator relays opaque blinded points around the ring; it never sees ids."""

from __future__ import annotations

from collections.abc import Mapping

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


def align_users(*, clients: Mapping[str, PartyClient], run_id: str) -> int:
    """Run multi-party ECDH-PSI through the parties; returns the size of the user intersection."""
    names = sorted(clients)
    lists = {p: _points(clients[p].psi_start(run_id=run_id), p) for p in names}
    for step in range(1, len(names)):
        nxt: dict[str, list[bytes]] = {}
        for reblinder in names:
            owner = ring_owner(names, reblinder=reblinder, step=step)
            answer = _points(clients[reblinder].psi_reblind(run_id=run_id, points=encode_points(lists[owner])),
                             reblinder)
            if len(answer) != len(lists[owner]):
                raise ProtocolError(f"party {reblinder} changed the length of a PSI list")
            nxt[owner] = answer
        lists = nxt
    common = intersect_tokens(lists)
    common_arr = np.frombuffer(b"".join(common), dtype=np.uint8)
    sizes = set()
    for p in names:
        body = pack_tree({"own": np.frombuffer(b"".join(lists[p]), dtype=np.uint8), "intersection": common_arr})
        sizes.add(clients[p].psi_finish(run_id=run_id, body=body))
    if sizes != {len(common)}:
        raise ProtocolError(f"parties disagree on the intersection size: {sorted(sizes)} vs {len(common)}")
    return len(common)
