"""P11: outside dev mode 32×'a' or 32 spaces were accepted as tokens (only known values and the length were
checked). The services now estimate a secret's entropy (length × the characters' empirical entropy, zero
for a constant step such as 'abcd…') and refuse whitespace, naming the setting; a real process exits with
one line and no traceback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from services.config import CoordinatorSettings, PartySettings

GOOD = "a-long-enough-secret-0123456789abcdef"


def _party(**values: object) -> PartySettings:
    base: dict[str, object] = {"database_url": "sqlite://", "admin_token": "admin-" + GOOD,
                               "coordinator_token": "coord-" + GOOD, "api_keys": ["key-" + GOOD]}
    return PartySettings(**{**base, **values})  # type: ignore[arg-type]


@pytest.mark.parametrize("weak, why", [
    ("a" * 32, "too little entropy"), (" " * 32, "whitespace"), ("ab" * 20, "too little entropy"),
    ("abcdefghijklmnopqrstuvwxyzabcdef"[:32], "too little entropy"), ("0123" * 10, "too little entropy"),
    ("secret token with spaces 1234567890", "whitespace"), ("\t" * 40, "whitespace"),
])
@pytest.mark.parametrize("setting", ["admin_token", "coordinator_token", "api_keys", "metrics_token"])
def test_party_refuses_low_entropy_tokens(setting: str, weak: str, why: str) -> None:
    value: object = [weak] if setting == "api_keys" else weak
    with pytest.raises(ValueError, match=f"PARTY_{setting.upper()} .*{why}"):
        _party(**{setting: value})


@pytest.mark.parametrize("weak", ["a" * 32, " " * 32, "xy" * 24])
def test_coordinator_refuses_low_entropy_tokens(weak: str) -> None:
    with pytest.raises(ValueError, match="COORD_ADMIN_TOKEN"):
        CoordinatorSettings(database_url="sqlite://", admin_token=weak)
    with pytest.raises(ValueError, match="COORD_API_KEYS"):
        CoordinatorSettings(database_url="sqlite://", admin_token="admin-" + GOOD, api_keys=[weak])


def test_generated_tokens_pass() -> None:
    for _ in range(200):  # the generators the error message recommends, and 32 hex characters
        settings = _party(admin_token=secrets.token_urlsafe(32), coordinator_token=secrets.token_hex(16),
                          api_keys=[secrets.token_urlsafe(24)], metrics_token=secrets.token_hex(32))
        assert settings.admin_token


def test_dev_mode_is_unchanged() -> None:
    assert PartySettings(database_url="sqlite://", dev_mode=True, admin_token="a" * 32).admin_token == "a" * 32


def test_the_process_exits_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PARTY_DATABASE_URL": f"sqlite:///{tmp_path}/p.db", "PARTY_DEV_MODE": "0",
           "PARTY_ADMIN_TOKEN": "a" * 32, "PARTY_COORDINATOR_TOKEN": secrets.token_urlsafe(32),
           "PARTY_API_KEYS": f'["{secrets.token_urlsafe(32)}"]'}
    done = subprocess.run([sys.executable, "-m", "party_api", "--port", "1"], env=env, capture_output=True,
                          text=True, timeout=120)
    out = (done.stdout + done.stderr).strip()
    assert done.returncode != 0 and "PARTY_ADMIN_TOKEN" in out and "entropy" in out
    assert "Traceback" not in out and "a" * 32 not in out
