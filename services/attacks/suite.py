"""The attack suite: run a protocol for real with every message recorded, then attack what was recorded.

Protocols (one engine setting each):
- "fedpergnn": graph expansion through a relay, LDP gradients, pseudo rows (services.fedpergnn);
- "projection_only": VerFedGNN with the random projection on and ternary quantization off;
- "verfedgnn": VerFedGNN with both on (the product's default);
- "plain": VerFedGNN with both off (no protection; the attacks' sanity reference).

Party attacks (de-anonymization, gradient) run on a federation with fake users; the coordinator
attack runs on the honest federation. Truth = the victim's honest users' training edges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from services.attacks.coordinator import (
    CoordinatorKnowledge,
    coordinator_attack,
    knowledge_from_seed,
)
from services.attacks.deanonymization import (
    deanonymize_across_rounds,
    deanonymize_aggregates,
    deanonymize_neighbours,
)
from services.attacks.fake_users import FakeUsers, truth_pairs, with_fake_users
from services.attacks.gradient import gradient_attack
from services.attacks.scoring import Pairs, guesses_per_user, popularity_guess, prf, random_guess_f1
from services.attacks.views import (
    expansion_view,
    ldp_gradient_rows,
    party_aggregate,
    victim_gradient_rows,
)
from services.crypto.secagg import decode_fixed
from services.evaluation.baselines import fedpergnn_federation
from services.evaluation.harness import Federation, RunResult, train_rounds
from services.federation.links import MessageLog, RecordingLink
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.rounds import ExchangeLog
from services.verfedgnn.config import TrainConfig, shared_projection
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.recording import VerFedGNNLog, record
from services.verfedgnn.rounds import InProcessFederation, finish_layout, unpack_finish
from services.verfedgnn.secure import dev_party_secret, secure_federation
from services.verfedgnn.types import PartyData

PROTOCOLS = ("fedpergnn", "projection_only", "verfedgnn")
SWITCHES = {"projection_only": (True, False), "verfedgnn": (True, True), "plain": (False, False)}


Tuning = Mapping[str, Mapping[str, Any]]  # protocol -> TrainConfig fields it changes (runner.PROTOCOL_TUNING)


def protocol_settings(protocol: str, base: TrainConfig, *, tuning: Tuning | None = None) -> TrainConfig | FedPerGNNConfig:
    """The engine settings of a protocol row, built on one shared model/optimizer config (plus its tuning)."""
    if tuning and protocol in tuning:
        base = base.model_copy(update=dict(tuning[protocol]))
    if protocol == "fedpergnn":
        return FedPerGNNConfig(train=base)
    if protocol not in SWITCHES:
        raise ValueError(f"unknown protocol {protocol!r}")
    proj, quant = SWITCHES[protocol]
    return base.model_copy(update={"use_projection": proj, "use_quantization": quant})


@dataclass
class RecordedRun:
    """A run's messages (rounds ≤ `recorded_rounds`) and, when trained to the end, its result."""

    protocol: str
    settings: TrainConfig | FedPerGNNConfig
    federation: Federation
    log: VerFedGNNLog | ExchangeLog
    result: RunResult | None


def _train_config(settings: TrainConfig | FedPerGNNConfig) -> TrainConfig:
    return settings.train if isinstance(settings, FedPerGNNConfig) else settings


def run_recorded(fed: Federation, *, protocol: str, settings: TrainConfig | FedPerGNNConfig, recorded_rounds: int = 1,
                 train: bool = False) -> RecordedRun:
    """Run the protocol in-process with recording links: `recorded_rounds` rounds, or to early stopping if `train`."""
    def keep_round(m: object) -> bool:
        return int(getattr(getattr(m, "step", m), "round_index", 0)) < recorded_rounds

    config = _train_config(settings)
    log: VerFedGNNLog | ExchangeLog
    if isinstance(settings, FedPerGNNConfig):
        fpg = fedpergnn_federation(fed.parties, config=settings, global_mean=fed.global_mean)
        log = fpg.record(keep=keep_round)
        step = fpg.run_round
    else:
        coord = CoordinatorTrainer(config=settings, n_users=fed.n_users, global_mean=fed.global_mean,
                                   item_counts={p.party_id: p.n_items for p in fed.parties})
        vfg = InProcessFederation(coordinator=coord, parties={p.party_id: PartyTrainer(config=settings, data=p,
                                                                                        seed=settings.seed)
                                                              for p in fed.parties})
        log = record(vfg, keep=keep_round)
        step = vfg.run_round
    if train:
        return RecordedRun(protocol, settings, fed, log, train_rounds(step, config=config, protocol=protocol))
    for t in range(recorded_rounds):
        step(t)
    return RecordedRun(protocol, settings, fed, log, None)


def _party(fed: Federation, party_id: str) -> PartyData:
    return next(p for p in fed.parties if p.party_id == party_id)


def with_popularity(guessed: Pairs, truth: Pairs, *, users: np.ndarray, n_items: int) -> dict[str, float]:
    """prf of the guesses, plus the F1 of the same number of guesses per user spent on the most popular / random items."""
    counts = guesses_per_user(guessed, users)
    baseline = prf(popularity_guess(truth, users=users, n_items=n_items, k=counts), truth)
    return {**prf(guessed, truth), "popularity_f1": baseline["f1"],
            "random_f1": random_guess_f1(truth, users=users, n_items=n_items, k=counts)}


def party_attacks(fed: Federation, *, protocol: str, base: TrainConfig, share: float, attacker: str = "party0",
                  victim: str = "party1", round_index: int = 0, observed_rounds: int = 0, seed: int = 0,
                  tuning: Tuning | None = None) -> dict[str, dict[str, float]]:
    """De-anonymization (by the attacking party) and gradient attack (coordinator + attacker) at one share.

    Fake users are added for a random `share` of the victim's items, the protocol runs with every
    message recorded, and both attacks read round `round_index`. With `observed_rounds` > 0 the
    attacking party also stacks that many rounds' aggregates ("deanonymization_multiround",
    VerFedGNN family only; k = each user's true count, the popularity guess gets the same).
    """
    attacked, fake = with_fake_users(fed, victim=victim, share=share, rng=np.random.default_rng([seed, 12]))
    settings = protocol_settings(protocol, base, tuning=tuning)
    multi = observed_rounds if isinstance(settings, TrainConfig) else 0
    run = run_recorded(attacked, protocol=protocol, settings=settings, recorded_rounds=max(round_index + 1, multi))
    victim_data = _party(attacked, victim)
    config = _train_config(settings)
    truth = truth_pairs(victim_data, n_honest=fake.n_honest, thd=config.thd)
    honest = np.arange(fake.n_honest, dtype=np.int64)
    deanon, grads = _attack_views(run, fake, honest=honest, attacker=attacker, victim=victim, round_index=round_index)
    out = {"deanonymization": with_popularity(deanon, truth, users=honest, n_items=victim_data.n_items),
           "gradient": with_popularity(grads, truth, users=honest, n_items=victim_data.n_items)}
    if multi and isinstance(run.log, VerFedGNNLog):
        views = [party_aggregate(run.log, config=config, n_users=attacked.n_users, attacker=attacker, round_index=t)
                 for t in range(multi)]
        degree = guesses_per_user(truth, honest)
        guessed = deanonymize_across_rounds(views, fake, honest=honest, k=degree)
        out["deanonymization_multiround"] = {**with_popularity(guessed, truth, users=honest,
                                                               n_items=victim_data.n_items), "rounds": float(multi)}
    return out


def _attack_views(run: RecordedRun, fake: FakeUsers, *, honest: np.ndarray, attacker: str, victim: str,
                  round_index: int) -> tuple[Pairs, Pairs]:
    """(de-anonymization guesses, gradient-attack guesses) from a recorded run."""
    n_users = run.federation.n_users
    if isinstance(run.log, ExchangeLog):
        gs = _train_config(run.settings).grad_scale
        down = expansion_view(run.log, attacker=attacker, round_index=round_index)
        rows = ldp_gradient_rows(run.log, n_users=n_users, grad_scale=gs, victim=victim, round_index=round_index)
        return deanonymize_neighbours(down, fake, honest=honest), gradient_attack(rows, fake, honest=honest)
    config = _train_config(run.settings)
    view = party_aggregate(run.log, config=config, n_users=n_users, attacker=attacker, round_index=round_index)
    rows = victim_gradient_rows(run.log, config=config, victim=victim, round_index=round_index)
    return (deanonymize_aggregates(view, fake, honest=honest, model=config.model),
            gradient_attack(rows, fake, honest=honest))


Observed = dict[str, tuple[np.ndarray, bool, bool]]  # message name -> (what it shows, projected?, signed?)


def _per_party_messages(run: RecordedRun, *, victim: str, round_index: int, projected: bool) -> Observed:
    """What today's coordinator receives from the victim alone: its layer-0 projection and its gradient upload."""
    config = _train_config(run.settings)
    if isinstance(run.log, ExchangeLog):
        rows = ldp_gradient_rows(run.log, n_users=run.federation.n_users, grad_scale=config.grad_scale,
                                 victim=victim, round_index=round_index)
        return {"gradient": (rows, False, False)}
    return {"aggregate": (run.log.projection(party_id=victim, round_index=round_index, layer=0), projected, True),
            "gradient": (victim_gradient_rows(run.log, config=config, victim=victim, round_index=round_index),
                         False, False)}


def coordinator_figures(run: RecordedRun, *, victim: str = "party1", round_index: int = 0,
                        observed: Observed | None = None,
                        knowledge: CoordinatorKnowledge | None = None) -> dict[str, object]:
    """The curious coordinator against one party: F1 of each message it can attack, the best, and the popularity guess.

    k = each user's true number of victim items (the attacker is told the counts, as in the
    independent audit this reproduces; the popularity guess gets the same counts), and, as
    `mean_k`, one k for everyone: the victim's announced training count / N, which the
    coordinator really knows.

    By default the coordinator sees each party's messages of round `round_index` separately and
    knows the run seed (`knowledge_from_seed`). A protocol that hides them passes what its
    coordinator does see instead (`observed`, e.g. {"aggregate_sum": (Σ_p Y_p, True, True)}) and
    what it can know (`knowledge`: its Φ and its guess of the victim's item embeddings; its k is
    not used, the two k above are).
    """
    fed = run.federation
    config = _train_config(run.settings)
    data = _party(fed, victim)
    truth = truth_pairs(data, n_honest=fed.n_users, thd=config.thd)
    users = np.arange(fed.n_users, dtype=np.int64)
    degree = np.bincount(np.fromiter((u for u, _ in truth), dtype=np.int64, count=len(truth)), minlength=fed.n_users)
    projected = isinstance(run.settings, TrainConfig) and run.settings.use_projection
    base = knowledge if knowledge is not None else knowledge_from_seed(
        config, n_users=fed.n_users, party_id=victim, n_items=data.n_items, train_count=len(data.train),
        projected=projected)
    mean_k = max(1, round(len(data.train) / fed.n_users))
    messages = observed if observed is not None else _per_party_messages(run, victim=victim, round_index=round_index,
                                                                          projected=projected)
    per_message: dict[str, dict[str, float]] = {}
    for name, (shown, proj, signed) in messages.items():
        row: dict[str, float] = {}
        for label, k in (("", degree), ("mean_k_", mean_k)):
            view = replace(base, phi=base.phi if proj else None, k=k)
            guessed = coordinator_attack(observed=shown, knowledge=view, users=users, signed=signed)
            row.update({f"{label}{key}": value for key, value in prf(guessed, truth).items()})
        per_message[name] = row
    best = max(per_message, key=lambda n: per_message[n]["f1"])
    pop = prf(popularity_guess(truth, users=users, n_items=data.n_items, k=degree), truth)["f1"]
    pop_mean = prf(popularity_guess(truth, users=users, n_items=data.n_items, k=mean_k), truth)["f1"]
    return {"f1": per_message[best]["f1"], "precision": per_message[best]["precision"],
            "recall": per_message[best]["recall"], "best_message": best, "popularity_f1": pop,
            "random_f1": random_guess_f1(truth, users=users, n_items=data.n_items, k=degree),
            "mean_k": mean_k, "mean_k_popularity_f1": pop_mean, "by_message": per_message}


def secure_coordinator_figures(fed: Federation, *, base: TrainConfig, victim: str = "party1",
                               round_index: int = 0) -> dict[str, object]:
    """The curious coordinator against a secure-aggregation run (the product's default coordinator run).

    The run is played as coordinator runs play it: Φ from the seed the parties agree on, item
    embeddings from each party's own secret, every summed message masked. What the coordinator can
    attack is what it can unmask: the SUM of the layer-0 projections and the SUM of the user-embedding
    gradient rows of round `round_index` (read from the masked vectors it received, summed as it
    sums them). Its best knowledge is what it can regenerate from the run seed it chose (Φ and the
    victim's item embeddings as a seed-derived run would have them), which is no longer the truth.
    """
    settings = protocol_settings("verfedgnn", base).model_copy(update={"secure_aggregation": True})
    assert isinstance(settings, TrainConfig)
    coord = CoordinatorTrainer(config=settings, n_users=fed.n_users, global_mean=fed.global_mean,
                               item_counts={p.party_id: p.n_items for p in fed.parties})
    federation = secure_federation(config=settings, datas={p.party_id: p for p in fed.parties}, coordinator=coord,
                                   secrets={p.party_id: dev_party_secret(p.party_id) for p in fed.parties},
                                   run_id="attacks")
    seen = MessageLog(keep=lambda r: r.direction == "up" and r.step.name in ("projection", "finish"))
    federation.links = {p: RecordingLink(link, seen) for p, link in federation.links.items()}
    for t in range(round_index + 1):
        federation.run_round(t)

    def unmasked(step: str, layer: int) -> np.ndarray:
        vectors = [np.asarray(r.payload["masked"], np.uint64)
                   for r in seen.select(step=step, round_index=round_index, layer=layer)]
        return decode_fixed(sum(vectors, np.zeros_like(vectors[0])))

    q = shared_projection(settings, fed.n_users).q
    projection_sum = unmasked("projection", 0).reshape(q, settings.dim)
    grads, _, _ = unpack_finish(unmasked("finish", -1), finish_layout(coord.public_params()))
    observed: Observed = {"aggregate_sum": (projection_sum, True, True),
                          "gradient_sum": (np.asarray(grads["user_emb"], np.float64), False, False)}
    data = _party(fed, victim)
    knowledge = knowledge_from_seed(settings, n_users=fed.n_users, party_id=victim, n_items=data.n_items,
                                    train_count=len(data.train), projected=True)
    run = RecordedRun("verfedgnn_secure", settings, fed, VerFedGNNLog(MessageLog(), coord.item_counts), None)
    figures = coordinator_figures(run, victim=victim, round_index=round_index, observed=observed, knowledge=knowledge)
    return {**figures, "sees": "masked vectors; unmasks only sums over all parties", "knows_seed": False}
