"""CLI failures are one line naming the URL (or the setting) and what to check: no traceback, no secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.localfed import free_port
from cli.main import app
from services.config import CoordinatorSettings, PartySettings
from tests.support.party import ADMIN, COORDINATOR, Party

SHORT = "Kq8vZp3Lw2Xr"  # a secret too short to be accepted; no 4 characters of it may be shown
# Long enough to be accepted, and with no 4 characters in common with any message (unlike the fixtures' tokens).
LONG = "Vb7Hq2Rk9Tn4Wm8Ys3Jd6Fp1Lc5Gx0ZaQe"


def _run(args: list[str], **env: str | None) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"PARTY_ADMIN_TOKEN": None, "COORD_ADMIN_TOKEN": None, **env})
    return result.exit_code, result.output


def _one_line(output: str) -> str:
    assert output.count("\n") == 1 and "Traceback" not in output, output
    return output.strip()


def _shows_no_part_of(secret: str, output: str) -> bool:
    return not any(secret[i:i + 4] in output for i in range(len(secret) - 3))


@pytest.mark.parametrize("command", [
    ["coordinator", "runs"], ["coordinator", "parties"], ["coordinator", "status", "r1"],
    ["coordinator", "create", "--wait"], ["coordinator", "remove-party", "p"], ["run", "cancel", "r1"],
    ["coordinator", "register-party", "p", "http://127.0.0.1:1"], ["privacy-report", "r1"],
    ["party", "evaluation-split", "FILE"], ["party", "ingest", "FILE"],
])
def test_unreachable_service_is_one_line_naming_the_url(command: list[str], tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("user_id,item_id\n1,2\n")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, output = _run([*[str(pairs) if a == "FILE" else a for a in command], "--url", url, "--token", ADMIN])
    service = "party" if command[0] == "party" else "coordinator"
    assert code == 1
    assert _one_line(output) == f"error cannot reach {url} (connection refused): is the {service} running? check --url"


def test_missing_and_wrong_tokens(party: Party, tmp_path: Path) -> None:
    data = tmp_path / "ratings.csv"
    data.write_text("user_id,item_id,rating\n1,2,3\n")
    code, output = _run(["party", "ingest", str(data), "--url", party.url])
    assert code == 1 and _one_line(output) == (
        f"error no credential for the party at {party.url}: pass --token (or PARTY_ADMIN_TOKEN), the party's admin token")
    code, output = _run(["party", "ingest", str(data), "--url", party.url, "--token", LONG])
    assert code == 1 and _one_line(output) == (
        f"error {party.url} refused the credential (HTTP 403: wrong admin token): check --token (or "
        "PARTY_ADMIN_TOKEN), the party's admin token")
    assert _shows_no_part_of(LONG, output)
    code, output = _run(["coordinator", "runs", "--url", "http://127.0.0.1:8000"])
    assert code == 1 and "no credential for the coordinator" in _one_line(output) and "COORD_ADMIN_TOKEN" in output


def test_short_party_secret_names_the_variable_and_shows_none_of_it() -> None:
    env = {"PARTY_ADMIN_TOKEN": LONG, "PARTY_COORDINATOR_TOKEN": COORDINATOR, "PARTY_API_KEYS": f'["{SHORT}"]',
           "PARTY_DATABASE_URL": "sqlite:///:memory:"}
    code, output = _run(["party", "serve"], **env)
    line = _one_line(output)
    assert code == 1 and "PARTY_API_KEYS is shorter than 32 characters" in line, line
    assert _shows_no_part_of(SHORT, output) and _shows_no_part_of(LONG, output)


def test_bad_coordinator_settings_name_the_variables_and_show_none_of_them() -> None:
    code, output = _run(["coordinator", "serve"], COORD_ADMIN_TOKEN=SHORT)
    assert code == 1 and "COORD_ADMIN_TOKEN is shorter than 32 characters" in _one_line(output)
    assert _shows_no_part_of(SHORT, output)
    key = "Zx9Qw7EvMn4Bt8Ly2Ku6Hs"  # not urlsafe base64 of 32 bytes
    code, output = _run(["coordinator", "serve"], COORD_ADMIN_TOKEN=LONG, COORD_CREDENTIAL_KEY=key)
    assert code == 1 and "COORD_CREDENTIAL_KEY must be urlsafe base64 of 32 bytes" in _one_line(output)
    assert _shows_no_part_of(key, output) and _shows_no_part_of(LONG, output)


def test_settings_errors_never_carry_their_input() -> None:
    """The settings classes themselves (used by `python -m party_api` too) hide the input in their errors."""
    with pytest.raises(ValueError) as party_error:
        PartySettings(admin_token=ADMIN, coordinator_token=COORDINATOR, api_keys=[SHORT])
    with pytest.raises(ValueError) as pattern_error:
        PartySettings(dev_mode=True, secret="zz" + SHORT)
    with pytest.raises(ValueError) as coord_error:
        CoordinatorSettings(admin_token=SHORT)
    for error in (party_error, pattern_error, coord_error):
        assert _shows_no_part_of(SHORT, str(error.value)), str(error.value)
    assert "PARTY_API_KEYS" in str(party_error.value)
