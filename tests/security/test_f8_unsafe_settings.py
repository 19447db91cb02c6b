"""F8/F10: outside dev mode the services refuse public, short or shared secrets, naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from services.config import DEV_ADMIN_TOKEN, DEV_API_KEY, CoordinatorSettings, PartySettings

LONG = "a-long-enough-secret-0123456789abcdef"


def _party(**values: object) -> PartySettings:
    base: dict[str, object] = {"database_url": "sqlite://", "admin_token": "admin-" + LONG,
                               "coordinator_token": "coord-" + LONG, "api_keys": ["key-" + LONG]}
    return PartySettings(**{**base, **values})  # type: ignore[arg-type]


@pytest.mark.parametrize("setting, values, named", [
    ("admin_token", {"admin_token": "change-me-party-a-admin"}, "PARTY_ADMIN_TOKEN is a public placeholder"),
    ("coordinator_token", {"coordinator_token": "change-me-coordinator-to-party-a"}, "PARTY_COORDINATOR_TOKEN"),
    ("api_keys", {"api_keys": ["change-me-party-a-client-key"]}, "PARTY_API_KEYS is a public placeholder"),
    ("admin_token", {"admin_token": DEV_ADMIN_TOKEN}, "PARTY_ADMIN_TOKEN is a public placeholder"),
    ("api_keys", {"api_keys": [DEV_API_KEY]}, "PARTY_API_KEYS is a public placeholder"),
    ("admin_token", {"admin_token": "x"}, "PARTY_ADMIN_TOKEN is shorter than 32"),
])
def test_party_refuses_placeholder_dev_and_short_secrets(setting: str, values: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        _party(**values)


def test_coordinator_refuses_api_key_equal_to_admin_token_and_short_tokens() -> None:
    with pytest.raises(ValueError, match="COORD_API_KEYS holds COORD_ADMIN_TOKEN"):
        CoordinatorSettings(database_url="sqlite://", admin_token=LONG, api_keys=[LONG])
    with pytest.raises(ValueError, match="COORD_ADMIN_TOKEN is a public placeholder"):
        CoordinatorSettings(database_url="sqlite://", admin_token="change-me-coordinator-admin")
    with pytest.raises(ValueError, match="COORD_API_KEYS is shorter than 32"):
        CoordinatorSettings(database_url="sqlite://", admin_token=LONG, api_keys=["k"])
    assert CoordinatorSettings(database_url="sqlite://", admin_token=LONG, api_keys=["key-" + LONG]).admin_token


def test_dev_mode_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ValueError, match="PARTY_DEV_MODE=1 with PARTY_HOST='0.0.0.0'"):
        PartySettings(database_url="sqlite://", dev_mode=True, host="0.0.0.0")
    with pytest.raises(ValueError, match="COORD_DEV_MODE=1 with COORD_HOST"):
        CoordinatorSettings(database_url="sqlite://", dev_mode=True, host="0.0.0.0")
    assert PartySettings(database_url="sqlite://", dev_mode=True).admin_token == DEV_ADMIN_TOKEN


def test_the_service_process_refuses_to_start_with_the_env_example_values(tmp_path: object) -> None:
    """As the tester did: `.env.example` copied as is, the party exits naming the setting."""
    env = {**os.environ, "PARTY_DATABASE_URL": f"sqlite:///{tmp_path}/p.db", "PARTY_DEV_MODE": "0",
           "PARTY_ADMIN_TOKEN": "change-me-party-a-admin", "PARTY_COORDINATOR_TOKEN": "change-me-coordinator-to-party-a",
           "PARTY_API_KEYS": '["change-me-party-a-client-key"]'}
    done = subprocess.run([sys.executable, "-m", "party_api", "--port", "1"], env=env, capture_output=True,
                          timeout=120)
    assert done.returncode != 0
    assert b"PARTY_ADMIN_TOKEN is a public placeholder" in done.stderr
