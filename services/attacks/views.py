"""What each attacker sees, read out of the messages a real run recorded.

VerFedGNN family (`VerFedGNNLog` of `services.verfedgnn.recording`) and FedPerGNN (`ExchangeLog` of
`services.fedpergnn.rounds`). Every view is decoded the way its receiver decodes it: the attacking
party reconstructs the relayed sum with Φᵀ as its trainer does, the coordinator dequantizes a
ternary upload and divides by grad_scale as `CoordinatorTrainer` does.
"""

from __future__ import annotations

import numpy as np

from services.crypto.projection import projection_matrix
from services.crypto.quantization import TernaryUpload, ternary_dequantize
from services.fedpergnn.messages import ExpansionDownload, LdpUpload
from services.fedpergnn.rounds import ExchangeLog, to_gradient_upload
from services.verfedgnn.config import TrainConfig, shared_projection
from services.verfedgnn.recording import VerFedGNNLog
from services.verfedgnn.types import GradientUpload


def user_gradient_rows(upload: GradientUpload, *, grad_scale: float) -> np.ndarray:
    """(N, D) user-embedding gradient rows as the coordinator decodes them."""
    if upload.quantized:
        q = upload.quantized["user_emb"]
        return ternary_dequantize(TernaryUpload(q.shape, q.r, q.indices, q.signs)) / np.float32(grad_scale)
    return np.asarray(upload.dense["user_emb"], dtype=np.float32)


def party_aggregate(log: VerFedGNNLog, *, config: TrainConfig, n_users: int, attacker: str, round_index: int,
                    layer: int = 0) -> np.ndarray:
    """(N, D) the attacking party's view of the other parties' layer aggregate: Φᵀ·(relayed sum), or the raw sum."""
    others = log.others(party_id=attacker, round_index=round_index, layer=layer).astype(np.float32)
    if not config.use_projection:
        return others
    return projection_matrix(shared_projection(config, n_users)).T @ others


def victim_gradient_rows(log: VerFedGNNLog, *, config: TrainConfig, victim: str, round_index: int) -> np.ndarray:
    """(N, D) the victim's user-embedding gradient rows as the coordinator receives them."""
    return user_gradient_rows(log.upload(party_id=victim, round_index=round_index), grad_scale=config.grad_scale)


def expansion_view(log: ExchangeLog, *, attacker: str, round_index: int) -> ExpansionDownload:
    """The rows and edges the relay handed the attacking party."""
    down = log.find(party_id=attacker, step="expansion_download", round_index=round_index)
    assert isinstance(down, ExpansionDownload)
    return down


def ldp_gradient_rows(log: ExchangeLog, *, n_users: int, grad_scale: float, victim: str,
                      round_index: int) -> np.ndarray:
    """(N, D) the victim's LDP user-embedding rows as the coordinator scatters them (zeros where not uploaded)."""
    up = log.find(party_id=victim, step="finish", round_index=round_index)
    assert isinstance(up, LdpUpload)
    return to_gradient_upload(up, n_users=n_users, grad_scale=grad_scale).dense["user_emb"]
