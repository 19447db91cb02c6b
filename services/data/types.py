"""In-memory rating tables shared by readers, splitter, generator, training and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Ratings:
    """Explicit ratings as parallel arrays; ids are the data set's external ids (as strings)."""

    user_ids: np.ndarray  # dtype object/str, shape (n,)
    item_ids: np.ndarray  # dtype object/str, shape (n,)
    ratings: np.ndarray  # float32, shape (n,)
    timestamps: np.ndarray  # int64, shape (n,); 0 where unknown

    def __len__(self) -> int:
        return int(self.ratings.shape[0])

    def subset(self, mask: np.ndarray) -> Ratings:
        """Rows selected by a boolean mask or index array."""
        return Ratings(self.user_ids[mask], self.item_ids[mask], self.ratings[mask], self.timestamps[mask])


@dataclass(frozen=True)
class SocialLinks:
    """Directed weighted links between users (external ids as strings)."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray  # float32


@dataclass(frozen=True)
class Dataset:
    """A data set with train/validation/test splits and an optional social graph."""

    name: str
    train: Ratings
    test: Ratings
    valid: Ratings | None = None
    social: SocialLinks | None = None
    rating_min: float = 1.0
    rating_max: float = 5.0
    meta: dict[str, object] = field(default_factory=dict)
