"""Where a VerFedGNN party's randomness comes from, and an in-process federation built as the HTTP parties build it.

Seeds: the projection Φ comes from a seed the parties agree on (`SecAggParty.agreed_seed`), each
party's item initialisation and quantization draw from its own secret (`party_seeds`); the
coordinator holds neither. The masked round itself is `rounds.run_round` with the masked
aggregation strategy (`services.federation.aggregation`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from services.crypto.secagg import SecAggParty
from services.federation.aggregation import MaskedSum, MaskedUpload
from services.federation.plan import Seeds
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.types import PartyData


def dev_party_secret(party_id: str) -> bytes:
    """A WELL-KNOWN secret for local runs, benchmarks and tests (the in-process reference reproduces it)."""
    return hashlib.sha256(b"fedrec-dev-party-secret|" + party_id.encode()).digest()


PartySeeds = Seeds  # Φ from the agreed seed, the rest from the party's own secret


def party_seeds(secagg: SecAggParty, *, run_seed: int, sealed: Mapping[str, str]) -> PartySeeds:
    """The seeds a party trains with, from the peers' sealed contributions addressed to it."""
    return PartySeeds(secagg.agreed_seed(run_seed, sealed), secagg.derived_seed("local", run_seed))


def seeded_trainer(*, config: TrainConfig, data: PartyData, seeds: PartySeeds) -> PartyTrainer:
    """A PartyTrainer whose Φ (the agreed seed) and private initialisation (its own seed) the coordinator lacks."""
    return PartyTrainer(config=config.model_copy(update={"projection_seed": seeds.projection_seed}), data=data,
                        seed=config.seed, local_seed=seeds.local_seed)


def agree_in_process(parties: Mapping[str, SecAggParty], *, run_seed: int) -> dict[str, PartySeeds]:
    """Key agreement and seed agreement among in-process parties (what the coordinator relays over HTTP)."""
    announcements = [p.announce() for p in parties.values()]
    for p in parties.values():
        p.accept(announcements)
    sealed = {pid: p.seal_contribution(run_seed) for pid, p in parties.items()}
    return {pid: party_seeds(p, run_seed=run_seed, sealed={v: sealed[v][pid] for v in sealed if v != pid})
            for pid, p in parties.items()}


def secure_federation(*, config: TrainConfig, datas: Mapping[str, PartyData], coordinator: CoordinatorTrainer,
                      secrets: Mapping[str, bytes], run_id: str) -> InProcessFederation:
    """An in-process masked federation whose seeds are agreed and party-local, as the HTTP parties build it."""
    sec = {p: SecAggParty(party_id=p, secret=secrets[p], run_id=run_id) for p in datas}
    seeds = agree_in_process(sec, run_seed=config.seed)
    trainers = {p: seeded_trainer(config=config, data=d, seeds=seeds[p]) for p, d in datas.items()}
    masks = {p: MaskedUpload(secagg=sec[p], parties=sorted(datas)) for p in datas}
    return InProcessFederation(coordinator=coordinator, parties=trainers, aggregations=masks, aggregation=MaskedSum())
