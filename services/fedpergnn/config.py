"""FedPerGNN run configuration: the shared GNN settings plus FedPerGNN's privacy mechanisms (engine and API)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.fedpergnn.ldp import ldp_epsilon
from services.verfedgnn.config import RunGuarantee, TrainConfig, VerFedGNNRunSettings
from services.verfedgnn.presets import PROTOCOL_TUNING, preset_values


class FedPerGNNSettings(BaseModel):
    """FedPerGNN's own mechanisms: graph expansion through a relay, LDP gradients, pseudo-interacted rows."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    use_ldp: bool = Field(True, description="clip every uploaded gradient element and add Laplace noise (LDP)")
    ldp_clip: float = Field(0.1, gt=0.0, le=1e3, description="δ: every uploaded gradient element is clipped to [−δ, δ]")
    ldp_scale: float = Field(0.2, gt=0.0, le=1e3, description="λ: Laplace noise scale added to every uploaded element")
    n_pseudo: int = Field(1000, ge=0, le=10_000_000, description="pseudo-interacted rows uploaded per round (capped by the "
                          "rows with no real gradient)")
    expand_every: int = Field(1, ge=1, le=100_000, description="rounds between graph expansions (FedPerGNN: once per epoch; "
                              "a full-batch round is an epoch here)")


class FedPerGNNConfig(FedPerGNNSettings):
    """Graph expansion through a relay, LDP gradients, pseudo-interacted rows (Wu et al. 2022, transposed).

    `train` carries the model, optimizer and seed (the same GNN as VerFedGNN, so accuracy is
    compared protocol against protocol); its projection and quantization switches are unused.
    """

    train: TrainConfig

    def guarantee(self) -> RunGuarantee:
        """The whole-run interaction-level DP guarantee of the shared training settings (randomized response)."""
        return self.train.guarantee()

    def privacy_record(self) -> dict[str, object]:
        """The mechanisms of this run and their parameters (as a run status shows them)."""
        return {
            "graph_expansion": {"enabled": True, "relay": "third party", "item_ids": "keyed pseudonyms (HMAC-SHA256, "
                                "fresh key per expansion)", "embeddings": "individual, unperturbed",
                                "expand_every": self.expand_every},
            "ldp": {"enabled": self.use_ldp, "clip": self.ldp_clip, "laplace_scale": self.ldp_scale,
                    "grad_scale": self.train.grad_scale,
                    "epsilon_per_element": ldp_epsilon(clip=self.ldp_clip, scale=self.ldp_scale)
                    if self.use_ldp else None},
            "pseudo_interactions": {"enabled": self.use_ldp and self.n_pseudo > 0, "rows": self.n_pseudo},
        }


DEFAULT_PRESET = "tuned"  # FedPerGNN's ranking objective was never measured: its runs default to the RMSE preset


def _train_schema(schema: dict[str, Any]) -> None:
    """The OpenAPI defaults of a FedPerGNN run's GNN settings are its default preset's."""
    values = {**preset_values(DEFAULT_PRESET, "gcn"), **PROTOCOL_TUNING.get(DEFAULT_PRESET, {}).get("fedpergnn", {})}
    for name, value in values.items():
        if name in schema["properties"]:
            schema["properties"][name]["default"] = value


class FedPerGNNTrainSettings(VerFedGNNRunSettings):
    """The shared GNN settings of a FedPerGNN run (VerFedGNN's; its projection, quantization and
    secure-aggregation switches are unused by FedPerGNN), each one overriding the run's preset."""

    model_config = ConfigDict(json_schema_extra=_train_schema)


class FedPerGNNRunConfig(FedPerGNNSettings):
    """A coordinator run's FedPerGNN settings: its mechanisms, and the GNN's under `train` (preset: tuned).

    Strict: numbers must be JSON numbers (no strings, no booleans), floats finite, keys known.
    """

    model_config = ConfigDict(strict=True)

    protocol: Literal["fedpergnn"] = Field(description="the federated protocol of the run")
    train: FedPerGNNTrainSettings = Field(default_factory=FedPerGNNTrainSettings,
                                          description="the GNN's settings, each overriding the run's preset")

    def explicit(self) -> dict[str, Any]:
        """The settings the caller set (protocol aside; `train` holds the GNN's), as plain values."""
        own = self.model_dump(include=self.model_fields_set - {"protocol", "train"})
        return {**own, "train": self.train.explicit()} if "train" in self.model_fields_set else own
