"""`fedrec party ingest` against a live party: chunked atomic uploads, refused chunks explained."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from tests.support.party import ADMIN, Party


def _ingest(party: Party, path: Path, *extra: str) -> tuple[int, str]:
    args = ["party", "ingest", str(path), "--url", party.url, "--token", ADMIN, *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_ml100k_file_in_chunks(party: Party, tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text(
        "".join(
            f"{u}\t{i}\t{1 + (u + i) % 5}\t88{u}{i}\n" for u in range(1, 8) for i in range(1, 6)
        )
    )
    code, output = _ingest(party, path, "--format", "ml100k", "--chunk-rows", "6")
    assert code == 0, output
    assert '"rows": 35' in output
    assert party.admin.get("/v1/counts").json()["interactions"] == 35


def test_refused_chunk_keeps_earlier_chunks_and_names_the_file_row(
    party: Party, tmp_path: Path
) -> None:
    path = tmp_path / "trust.txt"
    path.write_text("1 2 1\n2 3 1\n3 4 1\n4 5 1\n5 5 1\n6 7 1\n")
    code, output = _ingest(
        party, path, "--format", "filmtrust", "--kind", "social-links", "--chunk-rows", "3"
    )
    assert code == 1
    assert "data row 5" in output and "cannot link to itself" in output
    assert party.admin.get("/v1/counts").json()["social_links"] == 3
