"""The validation carve a party makes of its own rating rows: protocol-neutral (rows, split codes, a seed)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from services.federation.plan import SPLIT_CODES, RatingTable

_VALID_TAG = 0x56414C  # separates the validation carve's stream from the run's other seeded streams
_PRIVATE_TAG = 0x505256  # the carve of the private users' rows: its own stream, so the aligned carve ignores them


def carve_validation(table: RatingTable, *, fraction: float, seed: int, party_id: str,
                     aligned: Sequence[str] | None = None) -> np.ndarray:
    """Split codes with `fraction` of the training rows relabelled validation, when none is labelled (seeded).

    Rows are taken in (user, item) order first, so the carve does not depend on the database's row order.
    Given the `aligned` users, their rows are carved by one stream and every other row by another: which
    aligned rows are held out (a count the party reports) does not depend on any other user's ratings.
    """
    codes = np.asarray(table.codes).copy()
    if fraction <= 0 or np.any(codes == SPLIT_CODES["valid"]):
        return codes
    order = np.lexsort((np.asarray(table.items, dtype=str), np.asarray(table.users, dtype=str)))
    train = order[codes[order] == SPLIT_CODES["train"]]
    tag = int.from_bytes(hashlib.sha256(party_id.encode()).digest()[:4], "big")
    groups = [(train, [seed, _VALID_TAG, tag])]
    if aligned is not None:
        inside = np.isin(np.asarray(table.users, dtype=str)[train], np.asarray(list(aligned), dtype=str))
        groups = [(train[inside], [seed, _VALID_TAG, tag]), (train[~inside], [seed, _VALID_TAG, tag, _PRIVATE_TAG])]
    for rows, key in groups:
        rng = np.random.default_rng(key)
        codes[rng.choice(rows, size=int(round(fraction * rows.size)), replace=False)] = SPLIT_CODES["valid"]
    return codes
