"""De-anonymization attack of a curious party with fake users (VerFedGNN §4.1, App. I).

The attacking party knows which victim item each of its fake users rated. Against graph expansion
(FedPerGNN) it receives every neighbour item's embedding individually and matches each one to the
fake users' (eq. 11). Against VerFedGNN it receives only the per-user aggregate of the victim's
items (reconstructed from the relayed projection) and searches the subset of at most three fake
users' aggregates that explains it best (eqs. 62/64); `deanonymize_across_rounds` goes further
than the paper and solves for every fake user's weight with the rounds' aggregates stacked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.attacks.fake_users import FakeUsers
from services.attacks.scoring import Pairs, top_k_pairs
from services.attacks.search import Combine, gcn_mean, nearest_match, subset_search
from services.fedpergnn.messages import ExpansionDownload


def _combine_for(model: str) -> Combine:
    """How c one-item aggregates add up to a c-item aggregate for a layer kind."""
    if model == "gcn":
        return gcn_mean
    if model == "ggnn":  # the party-local mean: (1/c) Σ (eq. 64)
        return lambda sums, size: sums / float(size)
    raise ValueError(f"no de-anonymization combination for {model!r} (GAT's attention weights are unknown)")


def deanonymize_aggregates(view: np.ndarray, fake: FakeUsers, *, honest: np.ndarray, model: str = "gcn",
                           max_items: int = 3, beam: int = 8) -> Pairs:
    """Infer honest users' victim items from the attacker's (N, D) view of the victim's layer-0 aggregate.

    Returns:
        Guessed (user, victim item) pairs: the items of the fake users in each user's best subset.
    """
    subsets = subset_search(view[honest], view[fake.users], combine=_combine_for(model), max_items=max_items,
                            beam=beam)
    return {(int(u), int(fake.items[j])) for u, s in zip(honest.tolist(), subsets) for j in s.tolist()}


def deanonymize_neighbours(download: ExpansionDownload, fake: FakeUsers, *, honest: np.ndarray,
                           ratio: float = 0.5) -> Pairs:
    """Infer honest users' victim items from individually relayed neighbour embeddings (eq. 11).

    The fake users' own neighbour rows are the references (one per attacked item); each honest
    user's neighbour rows are matched to them by l1 distance, ambiguous matches are dropped.
    """
    users, rows = download.edge_users, download.edge_rows
    ref_rows = np.full(fake.users.size, -1, dtype=np.int64)
    position = {int(u): j for j, u in enumerate(fake.users.tolist())}
    for u, r in zip(users.tolist(), rows.tolist()):
        if u in position:
            ref_rows[position[u]] = r
    known = ref_rows >= 0
    match = nearest_match(download.embeddings, download.embeddings[ref_rows[known]], ratio=ratio)
    items_of = fake.items[known]
    is_honest = np.isin(users, honest)
    return {(int(u), int(items_of[match[r]])) for u, r in zip(users[is_honest].tolist(), rows[is_honest].tolist())
            if match[r] >= 0}


def deanonymize_across_rounds(views: Sequence[np.ndarray], fake: FakeUsers, *, honest: np.ndarray,
                              k: int | np.ndarray) -> Pairs:
    """Least squares over many rounds' aggregates: a stronger attack than the paper's 3-item subset search.

    A user's aggregate is the same linear combination of the fake users' rows in every round
    (the graph does not change, the item embeddings do), so stacking T rounds gives T·D equations
    for F unknown weights; with T·D ≥ F the weights are determined up to the noise. The k
    largest weights of each user are the guesses.

    Args:
        views: (N, D) attacker views of the victim's layer-0 aggregate, one per observed round.
        k: guesses per honest user (one number, or one per entry of `honest`).
    """
    targets = np.concatenate([np.asarray(v, np.float64)[honest] for v in views], axis=1)  # (n, T·D)
    dictionary = np.concatenate([np.asarray(v, np.float64)[fake.users] for v in views], axis=1)  # (F, T·D)
    weights = targets @ np.linalg.pinv(dictionary)  # (n, F)
    return {(u, int(fake.items[j])) for u, j in top_k_pairs(weights, honest, k)}
