"""services.p4gcn is layered: each module imports only the modules listed before it (no circle)."""

from __future__ import annotations

from tests.support.layout import imported_modules, layering_violations

ORDER = ["graph", "keys", "engines", "party", "ledger", "service", "backends", "client", "http", "trainer", "fusion"]


def test_p4gcn_modules_are_layered() -> None:
    assert layering_violations("services.p4gcn", ORDER) == []


def test_social_party_side_never_imports_the_rating_party_side() -> None:
    for module in ("graph", "engines", "party", "ledger", "service"):
        deps = imported_modules("services.p4gcn", module)
        assert not {"services.p4gcn.backends", "services.p4gcn.client", "services.p4gcn.http",
                    "services.p4gcn.trainer", "httpx", "torch"} & deps, module
