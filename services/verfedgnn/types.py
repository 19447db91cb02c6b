"""VerFedGNN data types: a party's ratings, round uploads, metric sums and round summaries.

Plain numpy dataclasses, so the same objects travel in-process or (encoded by
`services.verfedgnn.messages`) over HTTP.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from models import metrics
from services.federation.plan import SPLIT_CODES as SPLIT_CODES  # the runtime's types, re-exported
from services.federation.plan import RoundMetrics as RoundMetrics

SPLITS = ("train", "valid", "test")
RANK_K = 10  # the validation ranking figure parties report: NDCG@10 (metric key valid_ndcg@10)


@dataclass(frozen=True)
class RatingTriples:
    """Parallel arrays of (user index, party-local item index, rating)."""

    users: np.ndarray  # int64
    items: np.ndarray  # int64
    ratings: np.ndarray  # float32

    def __len__(self) -> int:
        return int(self.ratings.shape[0])

    @staticmethod
    def empty() -> RatingTriples:
        """No ratings."""
        return RatingTriples(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))

    def subset(self, mask: np.ndarray) -> RatingTriples:
        """The ratings where `mask` is true (order kept)."""
        return RatingTriples(self.users[mask], self.items[mask], self.ratings[mask])


@dataclass(frozen=True)
class FeatureEdges:
    """A party's side information as links (entity row, attribute token): tokens 0..n_tokens-1 are this party's
    attribute values (a categorical value, or a numeric column's quantile bin; `services.data.features`)."""

    entities: np.ndarray  # int64: user rows (PartyData's order) or party-local item indices
    tokens: np.ndarray  # int64
    n_tokens: int


@dataclass(frozen=True)
class PartyData:
    """What one party holds: its items' ratings by split, for the aligned users and its own other users.

    User indices 0..n_users-1 are the aligned users in the shared order (what every message is sized
    by); n_users..n_users+n_private-1 are `private_user_ids`, the party's users outside the
    intersection, which only this party trains and serves (their rows never leave it).
    """

    party_id: str
    n_users: int
    n_items: int
    total_items: int  # Σ_i M_i over all parties: public, announced once
    train: RatingTriples
    valid: RatingTriples = field(default_factory=RatingTriples.empty)
    test: RatingTriples = field(default_factory=RatingTriples.empty)
    rating_min: float = 1.0  # predictions are clamped to the rating range when scored
    rating_max: float = 5.0
    # implicit: each triple is an interaction and its "rating" its weight (> 0, 1 unless given);
    # the party then trains the ranking objective only and reports no rating errors
    feedback: Literal["explicit", "implicit"] = "explicit"
    private_user_ids: list[str] = field(default_factory=list)  # users n_users.. : this party's, not aligned
    # side information held by this party (never leaves it): user rows → attribute nodes, items → attributes
    user_features: FeatureEdges | None = None
    item_features: FeatureEdges | None = None

    @property
    def n_private(self) -> int:
        """Users of this party outside the intersection."""
        return len(self.private_user_ids)

    @property
    def implicit(self) -> bool:
        """True when the triples are interactions (weights), not ratings."""
        return self.feedback == "implicit"

    def mean_sums(self) -> tuple[int, float]:
        """(count, sum) of the aligned users' training ratings this party adds to the global mean μ: none for
        implicit feedback."""
        if self.implicit:  # weights are not ratings: μ stays the explicit parties' mean
            return 0, 0.0
        train = self.aligned("train")
        return len(train), float(train.ratings.sum())

    def split(self, name: str) -> RatingTriples:
        """Ratings of split `name` (train/valid/test), aligned and private users."""
        return {"train": self.train, "valid": self.valid, "test": self.test}[name]

    def aligned(self, name: str) -> RatingTriples:
        """Ratings of split `name` by aligned users only (what any count leaving the party covers)."""
        return self.split(name).subset(self.split(name).users < self.n_users)

    def private(self, name: str) -> RatingTriples:
        """Ratings of split `name` by the private users, user indices from 0 (row k: private_user_ids[k])."""
        t = self.split(name)
        own = t.subset(t.users >= self.n_users)
        return RatingTriples(own.users - self.n_users, own.items, own.ratings)


@dataclass(frozen=True)
class QuantizedArray:
    """Sparse ternary upload of one gradient: value r·sign at `indices` (flat), zero elsewhere."""

    shape: tuple[int, ...]
    r: float
    indices: np.ndarray  # int64, flat positions
    signs: np.ndarray  # int8, ±1

    def nbytes(self) -> int:
        """Bytes on the wire (indices + signs)."""
        return int(self.indices.nbytes + self.signs.nbytes)


@dataclass(frozen=True)
class MetricSums:
    """Sums a party reports for one split: squared and absolute errors and the count; for the validation
    split also the ranking sums (Σ NDCG@10 over the scored users and their number; `PartyTrainer`)."""

    sse: float = 0.0
    sae: float = 0.0
    count: int = 0
    ndcg: float = 0.0  # Σ NDCG@RANK_K over `ranked` users (validation split only)
    ranked: int = 0


@dataclass(frozen=True)
class GradientUpload:
    """A party's round result: public-parameter gradients (quantized or dense) and metric sums."""

    party_id: str
    round_index: int
    loss: float
    quantized: dict[str, QuantizedArray] = field(default_factory=dict)
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, MetricSums] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Payload size of the gradients."""
        return sum(q.nbytes() for q in self.quantized.values()) + sum(int(a.nbytes) for a in self.dense.values())


def party_number(party_id: str) -> int:
    """Stable integer of a party id (for seeding; independent of dict order and process)."""
    return zlib.crc32(party_id.encode("utf-8"))


def pooled_ndcg(sums: list[MetricSums]) -> float:
    """NDCG@RANK_K over every scored user of pooled ranking sums (nan when no user was scored)."""
    users = sum(s.ranked for s in sums)
    return sum(s.ndcg for s in sums) / users if users else float("nan")


def rmse_mae(sums: list[MetricSums]) -> tuple[float, float]:
    """RMSE and MAE of pooled metric sums (nan when there is nothing to score)."""
    return metrics.rmse_mae(sum(s.sse for s in sums), sum(s.sae for s in sums), sum(s.count for s in sums))


def build_party_data(
    *, party_id: str, user_order: list[str], item_order: list[str], users: list[str], items: list[str],
    ratings: np.ndarray, codes: np.ndarray, total_items: int, rating_min: float, rating_max: float,
    feedback: Literal["explicit", "implicit"] = "explicit",
    include_private: bool = False,
) -> PartyData:
    """PartyData over the aligned users (in `user_order`) and own items.

    Ratings of users outside `user_order` are dropped, unless `include_private`: then those users are
    the party's private users, indexed after the aligned ones in id order (`private_user_ids`).
    Each split is sorted by (user index, item index): the engine's float sums (loss, scatter-adds
    into embedding gradients, graph edges) depend on the order of the ratings, and the order rows
    come out of a database (or a data set file) is arbitrary. A canonical order makes the HTTP
    parties and the in-process reference compute bit-identical rounds.
    """
    uidx = {u: k for k, u in enumerate(user_order)}
    private: list[str] = []
    if include_private:
        private = sorted(set(users) - set(user_order))  # id order: independent of the rows' order
        uidx.update({u: len(user_order) + k for k, u in enumerate(private)})
    iidx = {v: k for k, v in enumerate(item_order)}
    u = np.array([uidx.get(x, -1) for x in users], dtype=np.int64)
    i = np.array([iidx.get(x, -1) for x in items], dtype=np.int64)
    r = np.asarray(ratings, np.float32)
    keep = (u >= 0) & (i >= 0)

    def part(code: int) -> RatingTriples:
        m = np.flatnonzero(keep & (codes == code))
        m = m[np.lexsort((r[m], i[m], u[m]))]  # by user, then item (then rating: fully order-free)
        return RatingTriples(u[m], i[m], r[m])

    return PartyData(party_id=party_id, n_users=len(user_order), n_items=len(item_order), total_items=total_items,
                     train=part(SPLIT_CODES["train"]), valid=part(SPLIT_CODES["valid"]),
                     test=part(SPLIT_CODES["test"]), rating_min=rating_min, rating_max=rating_max, feedback=feedback,
                     private_user_ids=private)
