"""VerFedGNN wire messages: a round's gradient upload as a message tree (and packed bytes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from services.crypto.quantization import TernaryUpload, decode_ternary, encode_ternary
from services.errors import ProtocolError
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.types import GradientUpload, MetricSums, QuantizedArray


def upload_tree(upload: GradientUpload) -> dict[str, Any]:
    """GradientUpload → message tree: ternary-encoded sparse gradients, dense arrays, metric sums."""
    quantized = {}
    for name, q in upload.quantized.items():
        order = np.argsort(q.indices, kind="stable")
        tern = TernaryUpload(shape=tuple(q.shape), r=float(q.r), indices=np.asarray(q.indices, np.int64)[order],
                             signs=np.asarray(q.signs, np.int8)[order])
        quantized[name] = np.frombuffer(encode_ternary(tern), dtype=np.uint8)
    metrics = {k: np.asarray([m.sse, m.sae, m.count, m.ndcg, m.ranked], dtype=np.float64)
               for k, m in upload.metrics.items()}
    return {"party_id": upload.party_id, "round_index": upload.round_index, "loss": float(upload.loss),
            "quantized": quantized, "dense": dict(upload.dense), "metrics": metrics}


def upload_from_tree(tree: Any, *, round_index: int, party_id: str | None = None) -> GradientUpload:
    """Parse an upload tree and check it belongs to the expected round (and party, when given)."""
    try:
        if int(tree["round_index"]) != round_index or (party_id is not None and tree["party_id"] != party_id):
            raise ProtocolError(f"upload is for {tree['party_id']}/round {tree['round_index']}, "
                                f"expected {party_id or 'a party'}/round {round_index}")
        quantized = {}
        for name, raw in tree["quantized"].items():
            t = decode_ternary(np.asarray(raw, np.uint8).tobytes())
            quantized[name] = QuantizedArray(shape=t.shape, r=t.r, indices=t.indices, signs=t.signs)
        metrics = {k: MetricSums(sse=float(v[0]), sae=float(v[1]), count=int(v[2]),
                                 ndcg=float(v[3]) if len(v) > 4 else 0.0, ranked=int(v[4]) if len(v) > 4 else 0)
                   for k, v in tree["metrics"].items()}
        return GradientUpload(party_id=str(tree["party_id"]), round_index=round_index, loss=float(tree["loss"]),
                              quantized=quantized, dense=dict(tree["dense"]), metrics=metrics)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        raise ProtocolError(f"malformed gradient upload: {exc!r}") from exc


def encode_upload(upload: GradientUpload) -> bytes:
    """GradientUpload → bytes (the packed `upload_tree`)."""
    return pack_tree(upload_tree(upload))


def decode_upload(data: bytes, *, party_id: str, round_index: int) -> GradientUpload:
    """Parse packed upload bytes and check they belong to the expected party and round."""
    return upload_from_tree(unpack_tree(data), round_index=round_index, party_id=party_id)
