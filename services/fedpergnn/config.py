"""FedPerGNN run configuration: the shared GNN settings plus FedPerGNN's privacy mechanisms."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.fedpergnn.ldp import ldp_epsilon
from services.verfedgnn.config import RunGuarantee, TrainConfig


class FedPerGNNConfig(BaseModel):
    """Graph expansion through a relay, LDP gradients, pseudo-interacted rows (Wu et al. 2022, transposed).

    `train` carries the model, optimizer and seed (the same GNN as VerFedGNN, so accuracy is
    compared protocol against protocol); its projection and quantization switches are unused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    train: TrainConfig
    use_ldp: bool = True
    ldp_clip: float = Field(0.1, gt=0.0, description="δ: every uploaded gradient element is clipped to [−δ, δ]")
    ldp_scale: float = Field(0.2, gt=0.0, description="λ: Laplace noise scale added to every uploaded element")
    n_pseudo: int = Field(1000, ge=0, description="pseudo-interacted rows uploaded per round (capped by the "
                          "rows with no real gradient)")
    expand_every: int = Field(1, ge=1, description="rounds between graph expansions (FedPerGNN: once per epoch; "
                              "a full-batch round is an epoch here)")

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
