"""The protocol registry: a protocol plugs in with one line here (its name → the module holding its PLAN).

Modules are imported by name when first asked for, so the runtime, the coordinator's runner and the
party's federation service import no protocol package.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from services.errors import ValidationFailed
from services.federation.plan import ProtocolPlan
from services.protocol.social import SocialHost

PROTOCOLS: dict[str, str] = {
    "verfedgnn": "services.verfedgnn.plan",
    "fedpergnn": "services.fedpergnn.plan",
}
DEFAULT = "verfedgnn"
# party-side services a party role hosts beside the federation (its PARTY_ROLE → the module holding `build`)
PARTY_SERVICES: dict[str, str] = {"social": "services.p4gcn.service"}


@cache
def plan(name: str) -> ProtocolPlan:
    """The registered protocol's plan; 422 naming the field for an unknown protocol."""
    module = PROTOCOLS.get(name)
    if module is None:
        raise ValidationFailed(f"unknown protocol {name!r} (known: {', '.join(sorted(PROTOCOLS))})",
                               extra={"field": "config.protocol"})
    found: ProtocolPlan = importlib.import_module(module).PLAN
    return found


def protocol_of(config: dict[str, object]) -> str:
    """The protocol a run's settings name (the default when they name none)."""
    return str(config.get("protocol") or DEFAULT)


def social_host(**settings: Any) -> SocialHost:
    """The social party's service, built by the module registered for it (settings: its `build` arguments)."""
    host: SocialHost = importlib.import_module(PARTY_SERVICES["social"]).build(**settings)
    return host

