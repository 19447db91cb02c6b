"""The ranking experiment of one seed: federated (ranking objective), each party alone, centralized baselines.

Every figure comes from `services.evaluation.ranking` under SPEC §5's protocol; the federated lists
are the parties' lists merged as the coordinator's fan-out merges them (`topk.evaluate_federation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from services.data.splits import vertical_split_dataset
from services.data.types import Dataset
from services.evaluation import ranking, ranking_baselines, topk
from services.evaluation.harness import RoundCallback, alone, ensure_validation
from services.evaluation.runner import load_dataset
from services.evaluation.served import served_all
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.reference import party_datas
from services.verfedgnn.types import PartyData

KEYS = ("ndcg@10", "recall@10", "ndcg@20", "recall@20", "coverage", "median_train_count")
Curve = list[dict[str, float]]


def seed_datasets(kind: str, data: str | Path, *, split: str, n_parties: int, seed: int,
                  valid_fraction: float = 0.1, shares: Sequence[float] | None = None) -> dict[str, Dataset]:
    """The seed's per-party data sets (party0.., items split at random, validation carved from train)."""
    ds = ensure_validation(load_dataset(kind, data, split=split, seed=seed), fraction=valid_fraction, seed=seed)
    return {f"party{k}": p for k, p in enumerate(vertical_split_dataset(ds, n_parties, seed=seed, shares=shares))}


def seed_parties(kind: str, data: str | Path, *, split: str, n_parties: int, seed: int,
                 valid_fraction: float = 0.1, shares: Sequence[float] | None = None) -> dict[str, PartyData]:
    """The seed's federation, built as the HTTP parties build theirs (ids party0.., sorted users and items)."""
    return party_datas(seed_datasets(kind, data, split=split, n_parties=n_parties, seed=seed,
                                     valid_fraction=valid_fraction, shares=shares))


def global_mean(parties: Mapping[str, PartyData]) -> float:
    """Mean training rating over every party (what the coordinator computes from the parties' sums)."""
    n = sum(len(d.train) for d in parties.values())
    return sum(float(d.train.ratings.sum()) for d in parties.values()) / max(1, n)


def central_implicit(view: topk.RankingView, parties: Mapping[str, PartyData]) -> ranking_baselines.Implicit:
    """Every party's training pairs in one place (global columns), validation ≥ 4 as the tuning target."""
    ids = view.party_ids

    def cat(split: str, what: str) -> np.ndarray:
        parts = [getattr(parties[p].split(split), what) + (view.offsets[p] if what == "items" else 0) for p in ids]
        return np.concatenate(parts)
    return ranking_baselines.Implicit(view.seen.shape[0], view.seen.shape[1], cat("train", "users"),
                                      cat("train", "items"),
                                      ranking.relevant_sets(cat("valid", "users"), cat("valid", "items"),
                                                            cat("valid", "ratings")))


def pick(figures: Mapping[str, float]) -> dict[str, float]:
    """The reported keys of a figures dict."""
    return {k: float(figures[k]) for k in KEYS}


def validation_view(parties: Mapping[str, PartyData]) -> topk.RankingView:
    """The ranking view of the validation split: candidates outside train, relevant = validation ratings ≥ 4."""
    return topk.ranking_view({p: replace(d, valid=d.train.subset(d.train.users < 0), test=d.valid)
                              for p, d in parties.items()})


def run_federated(parties: Mapping[str, PartyData], view: topk.RankingView, *, config: TrainConfig,
                  on_round: RoundCallback | None = None, curve_every: int = 10,
                  seed: int = 0) -> tuple[dict[str, Any], Curve]:
    """Federated figures (merged lists, RMSE, best round, party shares) and per-party figures; NDCG over rounds.

    The round kept is the one with the best merged validation NDCG@10 (what top-K serves, as the
    coordinator keeps it). `federated` is the served list: each party's federated scores blended with
    its local EASE (`services.evaluation.served`); `federated_unblended` the federated scores alone.
    """
    curve: Curve = []
    valid_view = validation_view(parties)
    rmse_by_round: dict[int, float] = {}

    def note(name: str, m: Any) -> None:
        rmse_by_round[m.round_index] = m.rmse["valid"]
        if on_round is not None:
            on_round(name, m)

    def on_model(t: int, scores: dict[str, np.ndarray]) -> None:
        if t % curve_every == 0:
            f = topk.evaluate_federation(view, scores)
            curve.append({"round": t, "ndcg@10": f["ndcg@10"]})

    def valid_loss(scores: dict[str, np.ndarray]) -> float:
        return 1.0 - topk.evaluate_federation(valid_view, scores)["ndcg@10"]

    run = topk.train_ranked(parties, config=config, protocol="federated", on_round=note, on_model=on_model,
                            valid_loss=valid_loss)
    for point in curve:  # a round's scores come before its metrics are noted
        point["valid_rmse"] = rmse_by_round.get(int(point["round"]), float("nan"))
    fed = run.scores()
    blended = served_all(parties, fed, seed=seed)
    scores = {p: s.scores for p, s in blended.items()}
    merged = topk.evaluate_federation(view, scores)
    out: dict[str, Any] = {**pick(merged), "rmse": run.result.rmse, "best_round": run.result.best_round,
                           "share_shown": {p: merged[f"share_shown:{p}"] for p in view.party_ids},
                           "share_relevant": {p: merged[f"share_relevant:{p}"] for p in view.party_ids}}
    per_party = [{"party": p, **pick(topk.evaluate_party(view, p, scores[p])),
                  "federated_unblended_ndcg@10": topk.evaluate_party(view, p, fed[p])["ndcg@10"],
                  "local_ease_ndcg@10": topk.evaluate_party(view, p, blended[p].local)["ndcg@10"],
                  "blend_weights": blended[p].model.blend.weights.tolist(),
                  "rmse": run.result.per_party[p]["rmse"]} for p in view.party_ids]
    unblended = topk.evaluate_federation(view, fed)
    local = topk.evaluate_federation(view, {p: s.local for p, s in blended.items()})
    return {"federated": out, "federated_per_party": per_party, "federated_unblended": pick(unblended),
            "local_ease_merged": pick(local)}, curve


def run_local(parties: Mapping[str, PartyData], view: topk.RankingView, *, config: TrainConfig,
              on_round: RoundCallback | None = None) -> list[dict[str, Any]]:
    """Each party alone (same objective, nothing to protect from), scored on its own catalogue."""
    off = config.model_copy(update={"use_projection": False, "use_quantization": False})
    rows = []
    for p in view.party_ids:
        solo = alone(parties[p])
        run = topk.train_ranked({p: solo}, config=off, global_mean=float(solo.train.ratings.mean()),
                                protocol=f"local:{p}", on_round=on_round)
        rows.append({"party": p, **pick(topk.evaluate_party(view, p, run.scores()[p])), "rmse": run.result.rmse})
    return rows


def run_baselines(parties: Mapping[str, PartyData], view: topk.RankingView, *, seed: int,
                  log: Callable[[str], None] = lambda _: None) -> dict[str, dict[str, Any]]:
    """Centralized most-popular, EASE (λ on validation), BPR-MF and LightGCN-BPR (epoch and L2 on validation)."""
    data = central_implicit(view, parties)
    out: dict[str, dict[str, Any]] = {"most_popular": pick(topk.evaluate_central(view,
                                                                                 ranking_baselines.most_popular(data)))}
    scores, lam = ranking_baselines.ease(data)
    out["ease"] = {**pick(topk.evaluate_central(view, scores)), "lambda": lam}
    log(f"ease λ={lam}: {out['ease']['ndcg@10']:.4f}")
    scores, params = ranking_baselines.tuned(ranking_baselines.bpr_mf, data, seed=seed)
    out["bprmf_centralized"] = {**pick(topk.evaluate_central(view, scores)), **params}
    log(f"bpr-mf {params}: {out['bprmf_centralized']['ndcg@10']:.4f}")
    scores, params = ranking_baselines.tuned(ranking_baselines.lightgcn_bpr, data, seed=seed)
    out["lightgcn_centralized"] = {**pick(topk.evaluate_central(view, scores)), **params}
    log(f"lightgcn {params}: {out['lightgcn_centralized']['ndcg@10']:.4f}")
    return out


def mean_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of every numeric key; `ndcg@10_seeds` lists the per-seed NDCG@10."""
    out: dict[str, Any] = {}
    for k, v in rows[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(np.mean([r[k] for r in rows]))
        elif isinstance(v, dict):
            out[k] = mean_rows([r[k] for r in rows])
        else:
            out[k] = v
    if "ndcg@10" in rows[0]:
        out["ndcg@10_seeds"] = [float(r["ndcg@10"]) for r in rows]
    return out
