"""A curious coordinator: least-squares inference of a party's interactions from what it relays.

Today the coordinator chooses the run seed, so it can regenerate Φ (`shared_projection`) and every
party's initial item embeddings E_p (seeded from the run seed and the party id), and it receives
each party's first projection Y_p^0 = Φ X_p^0 separately, with X_p^0 = W_p E_p (W_p: the party's
normalised user × item adjacency, the secret). The attack estimates X̂ = Φᵀ(ΦΦᵀ)⁻¹ Y (minimum-norm
solution), then the minimum-norm Ŵ = X̂ (EᵀE)⁻¹Eᵀ, and guesses each user's k highest-scoring items.
The same scoring applies to a gradient upload's user rows (their sign is unknown: |Ŵ| is ranked).

`coordinator_attack` takes only arrays, so it can be run on any protocol's messages: with secure
aggregation and party-local secrets the caller passes the SUM it observes and its best guess of
Φ and E (e.g. regenerated from a guessed seed), and compares the F1 with `popularity_guess`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.vertical import build_private
from services.attacks.scoring import Pairs, top_k_pairs
from services.crypto.projection import projection_matrix
from services.verfedgnn.config import TrainConfig, model_config, shared_projection
from services.verfedgnn.types import party_number


@dataclass(frozen=True)
class CoordinatorKnowledge:
    """What the coordinator can derive about a victim party without its data."""

    phi: np.ndarray | None  # (q, N) projection matrix; None when the observed rows are not projected
    items: np.ndarray  # (M, D) the victim's item embeddings as the coordinator believes them
    k: int | np.ndarray  # guesses per user: one number, or one per user index (all N users)


def knowledge_from_seed(config: TrainConfig, *, n_users: int, party_id: str, n_items: int, train_count: int,
                        projected: bool) -> CoordinatorKnowledge:
    """What a coordinator that chose `config.seed` knows of party `party_id` at round 0.

    Φ and the party's initial item embeddings are regenerated exactly as the engine seeds them
    (`PartyTrainer`: item seed = seed · 1000003 + crc32(party id) mod 1000003); k is the party's
    mean number of training ratings per user (`train_count` is announced to the coordinator).
    """
    seed = config.seed * 1_000_003 + party_number(party_id) % 1_000_003
    items = build_private(config=model_config(config), n_items=n_items, seed=seed).item_emb.detach().numpy()
    phi = projection_matrix(shared_projection(config, n_users)) if projected else None
    return CoordinatorKnowledge(phi=phi, items=items.copy(), k=max(1, round(train_count / n_users)))


def unproject(phi: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Minimum-norm X̂ with Φ X̂ = Y: Φᵀ (ΦΦᵀ)⁻¹ Y."""
    phi64 = phi.astype(np.float64)
    return phi64.T @ np.linalg.solve(phi64 @ phi64.T, y.astype(np.float64))


def interaction_scores(observed: np.ndarray, knowledge: CoordinatorKnowledge, *, signed: bool = True) -> np.ndarray:
    """(N, M) least-squares weight of every item in every user's observed row."""
    x = observed.astype(np.float64) if knowledge.phi is None else unproject(knowledge.phi, observed)
    w = x @ np.linalg.pinv(knowledge.items.astype(np.float64))  # (N, D) @ (D, M)
    return w if signed else np.abs(w)


def coordinator_attack(*, observed: np.ndarray, knowledge: CoordinatorKnowledge, users: np.ndarray,
                       signed: bool = True) -> Pairs:
    """Guessed (user, item) pairs: the k best-scoring items of each user in `users`.

    Args:
        observed: what the coordinator received that carries the victim's layer-0 aggregate:
            a projection Y (q, D) when `knowledge.phi` is set, else per-user rows (N, D)
            (an unprojected aggregate, or the user-embedding rows of a gradient upload).
        knowledge: Φ, the item embeddings it believes in, and k.
        users: the user indices to attack (e.g. the honest users).
        signed: rank by the signed weight (aggregates: items add up with positive weights) or by
            its magnitude (gradients: the sign of each item's term is unknown).
    """
    scores = interaction_scores(observed, knowledge, signed=signed)
    k = knowledge.k if np.ndim(knowledge.k) == 0 else np.asarray(knowledge.k)[users]
    return top_k_pairs(scores[users], users, k)
