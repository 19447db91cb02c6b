"""Pin every party's peers as an operator outside dev mode does (`fedrec party identity`, PARTY_PEER_IDENTITIES)."""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping

from services.crypto.secagg import SecAggParty


def pin_peers(envs: Mapping[str, MutableMapping[str, str]]) -> None:
    """Set PARTY_PEER_IDENTITIES in each party's environment: the others' identity keys, from their PARTY_SECRET."""
    keys = {pid: SecAggParty(party_id=pid, secret=bytes.fromhex(env["PARTY_SECRET"]), run_id="identity").identity
            for pid, env in envs.items()}
    for pid, env in envs.items():
        env["PARTY_PEER_IDENTITIES"] = json.dumps({p: k for p, k in keys.items() if p != pid})
