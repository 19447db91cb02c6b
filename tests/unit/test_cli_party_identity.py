"""`fedrec party identity` prints the identity key the party signs with (what its peers pin)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from services.crypto.secagg import SecAggParty
from services.db.session import migrate


def test_identity_is_the_key_the_party_signs_with(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrate(url)
    secret = "ab" * 32
    env = {"PARTY_DATABASE_URL": url, "PARTY_DEV_MODE": "1", "PARTY_PARTY_ID": "books", "PARTY_SECRET": secret}
    result = CliRunner().invoke(app, ["party", "identity"], env=env)
    assert result.exit_code == 0, result.output
    expected = SecAggParty(party_id="books", secret=bytes.fromhex(secret), run_id="r").identity
    assert json.loads(result.output) == {"books": expected}
    # without PARTY_SECRET: the secret the party keeps in its database, the same on every call
    env.pop("PARTY_SECRET")
    first = CliRunner().invoke(app, ["party", "identity"], env=env)
    again = CliRunner().invoke(app, ["party", "identity"], env=env)
    assert first.exit_code == 0 and first.output == again.output and json.loads(first.output) != {"books": expected}
