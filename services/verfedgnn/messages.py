"""VerFedGNN wire messages: JSON control messages (pydantic) and the binary encoding of a round's upload."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from services.crypto.quantization import TernaryUpload, decode_ternary, encode_ternary
from services.errors import ProtocolError
from services.protocol.federation import pack_tree, unpack_tree
from services.protocol.ids import IdStr
from services.verfedgnn.types import GradientUpload, MetricSums, QuantizedArray


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfigureRequest(_Msg):
    """Open a run at a party: engine config and seed (after PSI)."""

    run_id: str = Field(min_length=1, max_length=64)
    config: dict[str, Any]
    seed: int


class KeyAnnouncementModel(_Msg):
    """A party's X25519 public key for the run, signed with its Ed25519 identity key (hex)."""

    party_id: str = Field(min_length=1, max_length=64)
    dh_public: str = Field(pattern=r"^[0-9a-f]{64}$")
    identity: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: str = Field(pattern=r"^[0-9a-f]{128}$")


class ConfigureResponse(_Msg):
    """Public facts a party announces: its item count (M_p), rating sums for the global mean, its run key."""

    party_id: str
    n_users: int
    n_items: int
    train_count: int
    train_sum: float
    key: KeyAnnouncementModel


class PeersRequest(_Msg):
    """Every party's key announcement, relayed by the coordinator."""

    announcements: list[KeyAnnouncementModel] = Field(min_length=1, max_length=1000)


class PeersResponse(_Msg):
    """This party's seed contribution sealed for each peer (hex boxes by recipient)."""

    party_id: str
    sealed: dict[str, str]


class StartRequest(_Msg):
    """Everything public the trainer needs: Σ_i M_i, the per-party item counts, the global mean."""

    total_items: int = Field(ge=1)
    item_counts: dict[str, int]
    global_mean: float
    sealed: dict[str, str] = Field(default_factory=dict,
                                   description="the peers' sealed seed contributions addressed to this party")


class StartResponse(_Msg):
    """Where the party's trainer stands (restored snapshot round, -1 if fresh)."""

    party_id: str
    restored_round: int


class MaskedStepRequest(_Msg):
    """A masked step: the participants whose pairwise masks the party adds (they cancel in their sum)."""

    participants: list[IdStr] = Field(min_length=2, max_length=1000)


class RecoveryRequest(_Msg):
    """Unmask a step's sum: the survivor's masks with the parties that dropped out of that step."""

    step: Literal["projection", "finish"]
    layer: int = Field(ge=-1, le=64)
    dropped: list[IdStr] = Field(min_length=1, max_length=1000)
    size: int = Field(ge=1, le=1 << 28)


class AckResponse(_Msg):
    """A step was accepted."""

    ok: bool = True
    cached: bool = False


def encode_upload(upload: GradientUpload) -> bytes:
    """GradientUpload → bytes: ternary-encoded sparse gradients, dense npy arrays, metric sums."""
    quantized = {}
    for name, q in upload.quantized.items():
        order = np.argsort(q.indices, kind="stable")
        tern = TernaryUpload(shape=tuple(q.shape), r=float(q.r), indices=np.asarray(q.indices, np.int64)[order],
                             signs=np.asarray(q.signs, np.int8)[order])
        quantized[name] = np.frombuffer(encode_ternary(tern), dtype=np.uint8)
    metrics = {k: np.asarray([m.sse, m.sae, m.count], dtype=np.float64) for k, m in upload.metrics.items()}
    return pack_tree({"party_id": upload.party_id, "round_index": upload.round_index, "loss": float(upload.loss),
                      "quantized": quantized, "dense": dict(upload.dense), "metrics": metrics})


def decode_upload(data: bytes, *, party_id: str, round_index: int) -> GradientUpload:
    """Parse an upload and check it belongs to the expected party and round."""
    tree = unpack_tree(data)
    try:
        if tree["party_id"] != party_id or int(tree["round_index"]) != round_index:
            raise ProtocolError(f"upload is for {tree['party_id']}/round {tree['round_index']}, "
                                f"expected {party_id}/round {round_index}")
        quantized = {}
        for name, raw in tree["quantized"].items():
            t = decode_ternary(np.asarray(raw, np.uint8).tobytes())
            quantized[name] = QuantizedArray(shape=t.shape, r=t.r, indices=t.indices, signs=t.signs)
        metrics = {k: MetricSums(sse=float(v[0]), sae=float(v[1]), count=int(v[2]))
                   for k, v in tree["metrics"].items()}
        return GradientUpload(party_id=party_id, round_index=round_index, loss=float(tree["loss"]),
                              quantized=quantized, dense=dict(tree["dense"]), metrics=metrics)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ProtocolError(f"malformed gradient upload: {exc!r}") from exc
