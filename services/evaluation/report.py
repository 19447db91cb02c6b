"""Experiment summaries: mean ± std over seeds, a markdown table and a validation-RMSE plot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from services.evaluation.harness import RunResult


@dataclass
class Summary:
    """Test RMSE/MAE of one protocol over seeds (and per party)."""

    protocol: str
    rmse: list[float] = field(default_factory=list)
    mae: list[float] = field(default_factory=list)
    per_party: dict[str, list[float]] = field(default_factory=dict)

    def add(self, run: RunResult) -> None:
        """Accumulate one seed's run."""
        self.rmse.append(run.rmse)
        self.mae.append(run.mae)
        for party, row in sorted(run.per_party.items()):
            self.per_party.setdefault(party, []).append(row["rmse"])

    def stats(self) -> dict[str, float]:
        """{"rmse_mean", "rmse_std", "mae_mean", "mae_std"} (population std over seeds)."""
        return {"rmse_mean": float(np.mean(self.rmse)), "rmse_std": float(np.std(self.rmse)),
                "mae_mean": float(np.mean(self.mae)), "mae_std": float(np.std(self.mae))}

    def party_stats(self) -> dict[str, dict[str, float]]:
        """Per-party test RMSE mean and std."""
        return {p: {"rmse_mean": float(np.mean(v)), "rmse_std": float(np.std(v))} for p, v in self.per_party.items()}


def markdown_table(summaries: list[Summary], *, title: str) -> str:
    """One row per protocol (and per party for local-only and federated)."""
    lines = [f"### {title}", "", "| protocol | party | test RMSE (mean ± std) | test MAE | seeds |",
             "|---|---|---|---|---|"]
    for s in summaries:
        st = s.stats()
        lines.append(f"| {s.protocol} | all | {st['rmse_mean']:.4f} ± {st['rmse_std']:.4f} | "
                     f"{st['mae_mean']:.4f} ± {st['mae_std']:.4f} | {len(s.rmse)} |")
        if s.protocol in ("local", "federated"):
            for party, ps in s.party_stats().items():
                lines.append(f"| {s.protocol} | {party} | {ps['rmse_mean']:.4f} ± {ps['rmse_std']:.4f} | | |")
    return "\n".join(lines) + "\n"


def plot_validation(histories: dict[str, list[float]], path: Path) -> None:
    """PNG of validation RMSE per round, one line per protocol (first seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, hist in sorted(histories.items()):
        ax.plot(np.arange(1, len(hist) + 1), hist, label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("validation RMSE")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out: Path, summaries: list[Summary], histories: dict[str, list[float]], *, title: str,
                 config: dict[str, object]) -> None:
    """results.md, results.json and valid_rmse.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(summaries, title=title)
    (out / "results.md").write_text(table + "\n```json\n" + json.dumps(config, indent=1, default=str) + "\n```\n")
    payload = {s.protocol: {**s.stats(), "per_party": s.party_stats()} for s in summaries}
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    plot_validation(histories, out / "valid_rmse.png")


RANKING_COLUMNS = ("ndcg@10", "recall@10", "ndcg@20", "recall@20", "coverage", "median_train_count")


def ranking_table(rows: dict[str, dict[str, float]], *, title: str) -> str:
    """One row per model: the SPEC §5 ranking figures, and test RMSE where the model predicts ratings."""
    lines = [f"### {title}", "", "| model | " + " | ".join(RANKING_COLUMNS) + " | test RMSE |",
             "|---|" + "---|" * (len(RANKING_COLUMNS) + 1)]
    for name, r in rows.items():
        cells = [f"{r[c]:.4f}" if c != "median_train_count" else f"{r[c]:.0f}" for c in RANKING_COLUMNS]
        rmse = f"{r['rmse']:.4f}" if "rmse" in r else ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {rmse} |")
    return "\n".join(lines) + "\n"


def plot_ranking_curve(curve: list[dict[str, float]], path: Path) -> None:
    """PNG of validation RMSE and merged-list test NDCG@10 over rounds (federated run, first seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [c["round"] for c in curve]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(rounds, [c["valid_rmse"] for c in curve], color="tab:blue", label="validation RMSE")
    ax.set_xlabel("round")
    ax.set_ylabel("validation RMSE", color="tab:blue")
    other = ax.twinx()
    other.plot(rounds, [c["ndcg@10"] for c in curve], color="tab:orange", label="test NDCG@10 (merged)")
    other.set_ylabel("NDCG@10", color="tab:orange")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
