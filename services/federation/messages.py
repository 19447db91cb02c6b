"""The run's set-up messages, the same for every protocol: configure → peers (key agreement) → start (JSON)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.crypto.secagg import KeyAnnouncement


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WarmStartRef(_Msg):
    """The release a warm run starts from, and the run that trained it."""

    release_id: str = Field(min_length=1, max_length=64)
    run_id: str = Field(min_length=1, max_length=64)
    round_index: int = Field(ge=0, description="the round of that run whose model the release holds")


class ConfigureRequest(_Msg):
    """Open a run at a party: engine config and seed (after PSI); a warm run names the release it starts from."""

    run_id: str = Field(min_length=1, max_length=64)
    config: dict[str, Any]
    seed: int
    warm_start: WarmStartRef | None = None


class KeyAnnouncementModel(_Msg):
    """A party's X25519 public key for the run, signed with its Ed25519 identity key (hex)."""

    party_id: str = Field(min_length=1, max_length=64)
    dh_public: str = Field(pattern=r"^[0-9a-f]{64}$")
    identity: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: str = Field(pattern=r"^[0-9a-f]{128}$")


class ConfigureResponse(_Msg):
    """Public facts a party announces: its item count (M_p), rating sums for the global mean, its run key."""

    party_id: str
    n_users: int
    n_items: int
    train_count: int
    train_sum: float
    key: KeyAnnouncementModel
    user_rows: list[int] | None = Field(
        default=None, description="warm run: for each aligned user (in the run's order), its row in the release's "
        "run, -1 for a user new since then (None: cold run, or this party did not stage the release)")


class PeersRequest(_Msg):
    """Every party's key announcement, relayed by the coordinator."""

    announcements: list[KeyAnnouncementModel] = Field(min_length=1, max_length=1000)


class PeersResponse(_Msg):
    """This party's seed contribution sealed for each peer (hex boxes by recipient)."""

    party_id: str
    sealed: dict[str, str]


class StartRequest(_Msg):
    """Everything public the trainer needs: Σ_i M_i, the per-party item counts, the global mean."""

    total_items: int = Field(ge=1)
    item_counts: dict[str, int]
    global_mean: float
    sealed: dict[str, str] = Field(default_factory=dict,
                                   description="the peers' sealed seed contributions addressed to this party")


class StartResponse(_Msg):
    """Where the party's trainer stands (restored snapshot round, -1 if fresh)."""

    party_id: str
    restored_round: int


def announcements_from(rows: Sequence[Mapping[str, str]]) -> list[KeyAnnouncement]:
    """KeyAnnouncements from their JSON rows."""
    return [KeyAnnouncement(r["party_id"], r["dh_public"], r["identity"], r["signature"]) for r in rows]
