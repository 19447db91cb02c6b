"""N11: outside dev mode a party refuses the demo's public PARTY_SECRET and low-entropy ones (all-zero,
repeated bytes), naming the variable and echoing no part of the value; dev mode (the demo) keeps working."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.config import PartySettings, party_secret_problem
from services.verfedgnn.secure import dev_party_secret

LONG = "a-long-enough-secret-0123456789abcdef"
BASE: dict[str, object] = {"database_url": "sqlite://", "admin_token": "admin-" + LONG,
                           "coordinator_token": "coord-" + LONG, "api_keys": ["key-" + LONG]}


@pytest.mark.parametrize("party_id, secret, reason", [
    ("party0", dev_party_secret("party0").hex(), "demo's public secret"),
    ("acme", dev_party_secret("party1").hex(), "demo's public secret"),  # another demo party's secret
    ("acme", "00" * 32, "too little entropy"),
    ("acme", "ab" * 16, "too little entropy"),
    ("acme", "0123" * 16, "too little entropy"),
    ("acme", bytes(range(32)).hex(), "too little entropy"),  # a counting pattern
])
def test_public_and_low_entropy_secrets_are_refused_outside_dev_mode(party_id: str, secret: str,
                                                                     reason: str) -> None:
    with pytest.raises(ValidationError, match=f"PARTY_SECRET (is the|has) .*{reason}") as info:
        PartySettings(**BASE, party_id=party_id, secret=secret)  # type: ignore[arg-type]
    message = info.value.errors()[0]["msg"]  # what `settings_or_exit` prints (pydantic's str adds the input)
    assert not any(secret[k:k + 8] in message for k in range(0, len(secret) - 8))
    # Dev mode (the demo, on loopback) accepts it.
    assert PartySettings(**BASE, party_id=party_id, secret=secret, dev_mode=True).secret == secret  # type: ignore[arg-type]


def test_random_secrets_pass() -> None:
    for _ in range(200):
        assert party_secret_problem(secrets.token_hex(16), "acme") is None
        assert party_secret_problem(secrets.token_hex(32), "party0") is None


def test_the_process_exits_with_one_line_naming_the_variable(tmp_path: Path) -> None:
    """As the probe did: the demo's PARTY_SECRET on a party outside dev mode."""
    secret = dev_party_secret("party0").hex()
    env = {**os.environ, "PARTY_DATABASE_URL": f"sqlite:///{tmp_path}/p.db", "PARTY_DEV_MODE": "0",
           "PARTY_PARTY_ID": "party0", "PARTY_ADMIN_TOKEN": "admin-" + LONG,
           "PARTY_COORDINATOR_TOKEN": "coord-" + LONG, "PARTY_SECRET": secret}
    done = subprocess.run([sys.executable, "-m", "party_api", "--port", "1"], env=env, capture_output=True,
                          timeout=120)
    err = done.stderr.decode()
    assert done.returncode != 0
    assert "PARTY_SECRET is the demo's public secret" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not any(secret[k:k + 8] in err for k in range(0, len(secret) - 8))  # no part of the value
    assert LONG not in err  # nor of the other secrets
