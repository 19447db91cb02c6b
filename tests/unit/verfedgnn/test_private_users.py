"""A party's non-aligned users: indexed after the aligned ones, trained with private rows, never in a message."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from services.federation import registry
from services.federation.plan import RatingTable
from services.party.erasure import _trainer
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.plan import PLAN, carve_validation
from services.verfedgnn.private_data import training_data
from services.verfedgnn.state_codec import dump_state, load_state
from services.verfedgnn.types import SPLIT_CODES, PartyData, RatingTriples, build_party_data

N, P, M = 30, 12, 25


def _table(seed: int = 0) -> RatingTable:
    """Ratings of 30 aligned users a00..a29 and 12 users p00..p11 held by this party only."""
    rng = np.random.default_rng(seed)
    users = [f"a{k:02d}" for k in range(N)] + [f"p{k:02d}" for k in range(P)]
    rows = sorted({(u, f"i{v:02d}") for u in users for v in rng.choice(M, size=8, replace=False).tolist()})
    codes = rng.choice([0, 0, 0, 0, 1, 2], size=len(rows)).astype(np.int8)
    return RatingTable(np.array([u for u, _ in rows], dtype=object), np.array([i for _, i in rows], dtype=object),
                       rng.integers(1, 6, size=len(rows)).astype(np.float32), codes)


ALIGNED = [f"a{k:02d}" for k in range(N)]
ITEMS = [f"i{v:02d}" for v in range(M)]


def _data(table: RatingTable, *, include_private: bool = True) -> PartyData:
    return build_party_data(party_id="p0", user_order=ALIGNED, item_order=ITEMS,
                            users=[str(u) for u in table.users], items=[str(i) for i in table.items],
                            ratings=table.ratings, codes=table.codes, total_items=2 * M, rating_min=1.0,
                            rating_max=5.0, include_private=include_private)


def _only_aligned(table: RatingTable) -> RatingTable:
    keep = np.isin(np.asarray(table.users, dtype=str), ALIGNED)
    return RatingTable(table.users[keep], table.items[keep], table.ratings[keep], table.codes[keep])


CONFIG = TrainConfig(dim=4, layers=2, use_quantization=False, q_ratio=0.3, seed=3, rank_weight=1.0, rank_dims=1,
                     reg=0.1, weight_decay=1.0, reg_bias=0.1, thd=3.0)


def test_private_users_follow_the_aligned_ones_and_counts_cover_aligned_users_only() -> None:
    table = _table()
    data = _data(table)
    assert data.n_users == N and data.private_user_ids == [f"p{k:02d}" for k in range(P)]
    for split in ("train", "valid", "test"):
        t = data.split(split)
        assert (t.users < N + P).all() and np.all(np.diff(t.users) >= 0)
        assert len(data.aligned(split)) + len(data.private(split)) == len(t)
        assert (data.private(split).users < P).all()
    without = _data(table, include_private=False)
    assert without.private_user_ids == [] and len(without.train) == len(data.aligned("train"))
    train = data.aligned("train")
    assert PLAN.announce(data) == (len(train), float(train.ratings.sum())) and len(train) < len(data.train)
    # FedPerGNN keeps its behaviour: it trains the aligned users only
    fpg = registry.plan("fedpergnn")
    loaded = fpg.load(config=fpg.config({"train": {}}, seed=0, rounds=1), party_id="p0", table=table,
                      user_order=ALIGNED, item_order=ITEMS, total_items=2 * M, rating_range=(1.0, 5.0), local_seed=1)
    assert loaded.private_user_ids == [] and (loaded.train.users < N).all()


def test_the_aligned_block_does_not_depend_on_other_users_ratings() -> None:
    """The validation carve and randomized response of the aligned rows ignore the private rows."""
    table = _table(1)
    table = replace(table, codes=np.where(table.codes == SPLIT_CODES["valid"], 0, table.codes).astype(np.int8))
    both = carve_validation(table, fraction=0.2, seed=5, party_id="p0", aligned=ALIGNED)
    alone = carve_validation(_only_aligned(table), fraction=0.2, seed=5, party_id="p0", aligned=ALIGNED)
    mine = np.isin(np.asarray(table.users, dtype=str), ALIGNED)
    assert np.array_equal(both[mine], alone) and (both[~mine] == SPLIT_CODES["valid"]).any()
    dp = TrainConfig(dp_epsilon=2.0)
    a = training_data(_data(table), config=dp, local_seed=9)
    b = training_data(_data(_only_aligned(table)), config=dp, local_seed=9)
    for x, y in zip((a.aligned("train").users, a.aligned("train").items, a.aligned("train").ratings),
                    (b.train.users, b.train.items, b.train.ratings)):
        assert np.array_equal(x, y)
    assert len(a.private("train")) > 0 and b.n_private == 0


def _round(trainer: PartyTrainer, public: dict[str, np.ndarray], t: int,
           rng: np.random.Generator) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    trainer.begin_round(round_index=t, public=public)
    ys = []
    for k in range(trainer.public.config.n_layers):
        ys.append(trainer.layer_projection(layer=k))
        trainer.receive_projection_sum(layer=k, others=rng.normal(size=ys[-1].shape).astype(np.float32))
    up = trainer.finish_round()
    return ys, {**up.dense, "loss": np.array(up.loss), "metrics": np.array([list(vars(m).values())
                                                                            for m in up.metrics.values()])}


def test_nothing_a_party_sends_depends_on_its_private_users_before_they_train_its_items() -> None:
    """Round 0 from the same state: projections, public gradients, loss and metric sums are bit-identical with
    and without the private users' ratings; the private users get gradients, the public parameters none of theirs.
    Round 1 differs: the item parameters learnt from the private users' ratings (the party's own, as any rating)."""
    table = _table(2)
    with_private = PartyTrainer(config=CONFIG, data=_data(table), seed=CONFIG.seed, local_seed=11)
    without = PartyTrainer(config=CONFIG, data=_data(_only_aligned(table)), seed=CONFIG.seed, local_seed=11)
    assert with_private.own_users is not None and without.own_users is None
    start = with_private.own_users.user_emb.detach().clone()
    public = with_private.public.arrays()
    first = _round(with_private, public, 0, np.random.default_rng(0))
    second = _round(without, public, 0, np.random.default_rng(0))
    for a, b in zip(first[0], second[0]):
        assert a.shape == (round(CONFIG.q_ratio * N), CONFIG.dim) and np.array_equal(a, b)
    assert first[1].keys() == second[1].keys()
    for name in first[1]:
        assert np.array_equal(first[1][name], second[1][name]), name
    assert first[1]["user_emb"].shape == (N, CONFIG.dim)
    assert not torch.equal(with_private.own_users.user_emb.detach(), start)  # the private rows took a step
    assert with_private.last_private_metrics["train"].count == len(with_private.data.private("train"))
    later = _round(with_private, public, 1, np.random.default_rng(1))
    other = _round(without, public, 1, np.random.default_rng(1))
    assert not np.array_equal(later[0][0], other[0][0])
    model = with_private.serving_model()
    assert model["user_repr"].shape == (N + P, CONFIG.dim) and model["user_bias"].shape == (N + P,)


def test_private_users_learn() -> None:
    """The private users' training error falls over rounds (with the public parameters held fixed)."""
    trainer = PartyTrainer(config=CONFIG.model_copy(update={"lr": 0.1}), data=_data(_table(3)), seed=0, local_seed=2)
    public = trainer.public.arrays()
    errors = []
    for t in range(12):
        _round(trainer, public, t, np.random.default_rng(t))
        m = trainer.last_private_metrics["train"]
        errors.append(m.sse / m.count)
    assert errors[-1] < 0.6 * errors[0]


def test_checkpoint_keeps_private_rows_by_id_and_erasure_cuts_one_out() -> None:
    table = _table(4)
    trainer = PartyTrainer(config=CONFIG, data=_data(table), seed=0, local_seed=2)
    for t in range(3):
        _round(trainer, trainer.public.arrays(), t, np.random.default_rng(t))
    blob = dump_state(trainer.state_dict())
    gone = "p05"
    rewritten = _trainer(unpack_tree(blob, finite=False), gone)
    assert rewritten is not None and _trainer(unpack_tree(blob, finite=False), "a03") is None
    assert gone not in rewritten["private_users"]["ids"].tolist()
    # the party after the erasure: the user's ratings are gone, the run is rebuilt and restored
    keep = np.asarray(table.users, dtype=str) != gone
    after = PartyTrainer(config=CONFIG, data=_data(RatingTable(table.users[keep], table.items[keep],
                                                               table.ratings[keep], table.codes[keep])),
                         seed=0, local_seed=2)
    old_rows = trainer.own_users.user_emb.detach()  # type: ignore[union-attr]
    rest = [k for k, u in enumerate(trainer.data.private_user_ids) if u != gone]
    for state in (load_state(pack_tree(rewritten)), load_state(blob)):  # rewritten, or matched by id
        after.load_state_dict(state)
        assert after.own_users is not None and torch.equal(after.own_users.user_emb.detach(), old_rows[rest])
        opt = after._own_optimizer.state_dict()["state"]  # type: ignore[union-attr]
        assert all(v["sum"].shape[0] == P - 1 for v in opt.values())
    _round(after, after.public.arrays(), 3, np.random.default_rng(3))


def test_a_private_user_rated_nothing_in_train_still_gets_a_row() -> None:
    data = PartyData("p0", 2, 3, 3, RatingTriples(np.array([0, 1, 2]), np.array([0, 1, 2]), np.full(3, 4.0, np.float32)),
                     test=RatingTriples(np.array([3]), np.array([0]), np.array([5.0], np.float32)),
                     private_user_ids=["x", "y"])
    trainer = PartyTrainer(config=CONFIG.model_copy(update={"rank_weight": 0.0, "rank_dims": 0}), data=data, seed=0)
    _round(trainer, trainer.public.arrays(), 0, np.random.default_rng(0))
    assert trainer.serving_model()["user_repr"].shape == (4, CONFIG.dim)
    assert trainer.last_private_metrics["test"].count == 1


@pytest.mark.parametrize("model", ["gat", "ggnn", "mf"])
def test_every_layer_kind_trains_private_users(model: str) -> None:
    config = CONFIG.model_copy(update={"model": model, "rating_levels": 2 if model == "gat" else 0})
    trainer = PartyTrainer(config=config, data=_data(_table(5)), seed=0, local_seed=1)
    public = trainer.public.arrays()
    _round(trainer, public, 0, np.random.default_rng(0))
    assert trainer.public.user_emb.grad is not None
    assert trainer.serving_model()["user_repr"].shape == (N + P, CONFIG.dim)
    assert np.isfinite(trainer.serving_model()["user_repr"]).all()
