"""FedPerGNN messages: graph expansion (party → relay → party) and LDP gradient uploads (party → coordinator)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

import numpy as np

from services.verfedgnn.types import MetricSums

TOKEN_BYTES = 16
PER_USER = ("user_emb", "user_bias")  # public parameters with one row per user: uploaded row by row


def item_tokens(key: bytes, *, round_index: int, n_items: int) -> np.ndarray:
    """Keyed pseudonyms of a party's items for one expansion: HMAC-SHA256(key, round ‖ item), 16 bytes each.

    FedPerGNN encrypts item ids before they reach the third-party relay; a keyed hash is enough
    here because only the owner ever needs to map a token back (and it never has to). With a key
    only the owner holds, the relay and the other parties cannot tell which item a token stands
    for, and a fresh round in the message makes tokens unlinkable across expansions.
    """
    out = np.empty((n_items, TOKEN_BYTES), dtype=np.uint8)
    for v in range(n_items):
        digest = hmac.new(key, f"{round_index}:{v}".encode(), hashlib.sha256).digest()
        out[v] = np.frombuffer(digest[:TOKEN_BYTES], dtype=np.uint8)
    return out


@dataclass(frozen=True)
class ExpansionUpload:
    """What a party sends the relay: its items' embeddings under pseudonyms and its edges (user, token)."""

    party_id: str
    round_index: int
    tokens: np.ndarray  # uint8 (M, 16): one pseudonym per item, in a shuffled order
    embeddings: np.ndarray  # float32 (M, D): e_v^0 of the item with the same row's token
    edge_users: np.ndarray  # int64 (E,): aligned user index
    edge_tokens: np.ndarray  # uint8 (E, 16): the item's pseudonym


@dataclass(frozen=True)
class ExpansionDownload:
    """What the relay sends a party: the other parties' item embeddings (anonymous rows) and edges to them."""

    party_id: str
    round_index: int
    embeddings: np.ndarray  # float32 (R, D): one row per foreign item, shuffled
    edge_users: np.ndarray  # int64 (E,)
    edge_rows: np.ndarray  # int64 (E,): row of `embeddings`


@dataclass(frozen=True)
class LdpUpload:
    """A party's round result: clipped + Laplace-noised gradients of the public parameters.

    Per-user parameters travel as rows: `rows` lists the users uploaded (real and pseudo rows
    together, sorted, indistinguishable); every other public parameter travels whole.
    """

    party_id: str
    round_index: int
    loss: float
    rows: np.ndarray  # int64 (R,)
    per_user: dict[str, np.ndarray]  # name -> (R, ...) rows in the order of `rows`
    shared: dict[str, np.ndarray]  # name -> full-shape gradient
    metrics: dict[str, MetricSums] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Payload size of the gradients and row indices."""
        return int(self.rows.nbytes + sum(a.nbytes for a in self.per_user.values())
                   + sum(a.nbytes for a in self.shared.values()))
