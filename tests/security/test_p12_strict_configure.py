"""P12: the party coerced `dp_epsilon: true` to 1 (and "4" to 4): its configure was laxer than the
coordinator's strict run settings. A setting whose JSON type its field would coerce is now refused 422
naming the field, before the run is touched. Real `python -m party_api` process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.localfed import COORD_TOKEN, Proc, party_proc
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG

HEADERS = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("p12", tmp_path_factory.mktemp("p12")).start()
    try:
        yield proc
    finally:
        proc.stop()


def _configure(party: Proc, config: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{party.url}/v1/federation/runs/r12/configure", headers=HEADERS, timeout=30,
                      json={"run_id": "r12", "config": config, "seed": 0})


@pytest.mark.parametrize("field, value", [("dp_epsilon", True), ("dp_epsilon", "1.5"), ("dim", True),
                                          ("dim", "4"), ("layers", False), ("use_projection", 1),
                                          ("lr", "0.01")])
def test_coerced_types_are_refused(party: Proc, field: str, value: Any) -> None:
    answer = _configure(party, {**TINY_CONFIG, field: value})
    body = answer.json()
    assert answer.status_code == 422, body
    assert body["field"] == f"config.{field}", body


def test_well_typed_settings_reach_the_alignment_check(party: Proc) -> None:
    answer = _configure(party, {**TINY_CONFIG, "dp_epsilon": 2})  # an int for a float field is a JSON number
    assert answer.status_code == 409 and "alignment" in answer.json()["detail"], answer.text  # no PSI yet
