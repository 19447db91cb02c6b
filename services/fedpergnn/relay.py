"""The third-party relay of FedPerGNN's graph expansion, in the vertical setting.

Each party uploads its items' embeddings under keyed pseudonyms and its (user, pseudonym) edges;
the relay joins edges to embeddings by pseudonym and hands every party the OTHER parties' items
as anonymous rows (shuffled, no pseudonym) with the edges from the aligned users to those rows.
The relay learns the graph structure up to item pseudonyms; it never learns item ids.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from services.errors import ProtocolError
from services.fedpergnn.messages import ExpansionDownload, ExpansionUpload


def _rows_of(upload: ExpansionUpload) -> np.ndarray:
    """Row of `upload.embeddings` that each edge's token names (ProtocolError for an unknown token)."""
    table = np.ascontiguousarray(upload.tokens).view(np.uint64)  # (M, 2): a token as two 64-bit words
    edges = np.ascontiguousarray(upload.edge_tokens).view(np.uint64)
    order = np.lexsort((table[:, 1], table[:, 0]))
    key = table[order, 0]
    pos = np.clip(np.searchsorted(key, edges[:, 0]), 0, max(0, key.size - 1))
    rows = order[pos] if key.size else np.zeros(edges.shape[0], np.int64)
    if edges.shape[0] and (key.size == 0 or not np.array_equal(table[rows], edges)):
        raise ProtocolError(f"party {upload.party_id}: an edge names an item it did not upload")
    return rows.astype(np.int64)


class Relay:
    """Joins and forwards expansion uploads; its own rng shuffles the rows it hands out."""

    def __init__(self, *, rng: np.random.Generator) -> None:
        self.rng = rng

    def expand(self, uploads: Mapping[str, ExpansionUpload]) -> dict[str, ExpansionDownload]:
        """For every party: the other parties' item rows and the edges to them."""
        joined = {p: (u.embeddings, u.edge_users, _rows_of(u)) for p, u in sorted(uploads.items())}
        out = {}
        for recipient in sorted(uploads):
            parts = [v for p, v in joined.items() if p != recipient]
            dim = uploads[recipient].embeddings.shape[1]
            emb = np.concatenate([e for e, _, _ in parts]) if parts else np.zeros((0, dim), np.float32)
            offsets = np.cumsum([0] + [e.shape[0] for e, _, _ in parts])
            users = np.concatenate([u for _, u, _ in parts]) if parts else np.zeros(0, np.int64)
            rows = np.concatenate([r + offsets[k] for k, (_, _, r) in enumerate(parts)]) if parts \
                else np.zeros(0, np.int64)
            perm = self.rng.permutation(emb.shape[0])  # new row of old row i is where(perm == i)
            new_row = np.empty_like(perm)
            new_row[perm] = np.arange(perm.size)
            rows = new_row[rows] if rows.size else rows
            order = np.lexsort((rows, users))  # canonical edge order: the receiver's sums do not depend on it
            out[recipient] = ExpansionDownload(recipient, uploads[recipient].round_index,
                                               np.ascontiguousarray(emb[perm], dtype=np.float32),
                                               users[order].astype(np.int64), rows[order].astype(np.int64))
        return out
