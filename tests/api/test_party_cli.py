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


def _labels(party: Party) -> dict[str, set[str]]:
    from sqlalchemy.orm import Session

    from services.party import fed_store

    with Session(party.engine) as session:
        return fed_store.test_items_by_user(session=session)


def test_evaluation_split_from_ml100k_test_file(party: Party, tmp_path: Path) -> None:
    data = tmp_path / "u.data"
    data.write_text("".join(f"{u}\t{i}\t{1 + (u + i) % 5}\t88{u}{i}\n" for u in range(1, 5) for i in range(1, 5)))
    assert _ingest(party, data, "--format", "ml100k")[0] == 0
    test = tmp_path / "u1.test"  # ML-100K's layout: user, item, rating, timestamp (the last two ignored)
    test.write_text("1\t2\t3\t881250949\n3\t4\t5\t891717742\n")
    valid = tmp_path / "valid.csv"
    valid.write_text("user_id,item_id\n2,1\n")
    args = ["party", "evaluation-split", str(test), "--valid", str(valid), "--url", party.url, "--token", ADMIN]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert '"rows": 3' in result.output and '"test": 2' in result.output and '"valid": 1' in result.output
    assert _labels(party) == {"1": {"2"}, "3": {"4"}}
    # A header may carry the split per row; a new file replaces the earlier labels.
    mixed = tmp_path / "split.csv"
    mixed.write_text("user_id,item_id,split\n4,4,test\n1,1,valid\n")
    result = CliRunner().invoke(app, ["party", "evaluation-split", str(mixed), "--url", party.url, "--token", ADMIN])
    assert result.exit_code == 0, result.output
    assert _labels(party) == {"4": {"4"}}


def test_evaluation_split_refuses_a_bad_file_in_one_line(party: Party, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("user_id,item_id,split\n1,2,test\n1,3,holdout\n")
    result = CliRunner().invoke(app, ["party", "evaluation-split", str(bad), "--url", party.url, "--token", ADMIN])
    assert result.exit_code == 1
    assert result.output == f"error {bad}:3: split must be one of train, valid, test, got 'holdout'\n"
    short = tmp_path / "short.tsv"
    short.write_text("1\t2\n3\n")
    result = CliRunner().invoke(app, ["party", "evaluation-split", str(short), "--url", party.url, "--token", ADMIN])
    assert result.exit_code == 1 and f"{short}:2: expected user and item columns" in result.output
    assert _labels(party) == {}


def test_users_from_a_plain_list_and_a_csv(party: Party, tmp_path: Path) -> None:
    plain = tmp_path / "ids.txt"
    plain.write_text("ann\nbo\n\nann\n")
    result = CliRunner().invoke(app, ["party", "users", str(plain), "--url", party.url, "--token", ADMIN])
    assert result.exit_code == 0, result.output
    assert '"users": 2, "created": 2, "existing": 0' in result.output
    table = tmp_path / "customers.csv"
    table.write_text("name,user_id\nAnn,ann\n\"Cy, Jr\",cy\n")
    result = CliRunner().invoke(app, ["party", "users", str(table), "--url", party.url, "--token", ADMIN])
    assert result.exit_code == 0, result.output
    assert '"users": 2, "created": 1, "existing": 1' in result.output
    assert party.admin.get("/v1/users/cy").json()["interactions"] == 0


def test_users_refuses_a_bad_file_in_one_line(party: Party, tmp_path: Path) -> None:
    for text, says in (("ok\n" + "x" * 300 + "\n", ":2: id longer than 255"),
                       ("name,email\na,b\n", ":1: a CSV needs a user_id column"),
                       ("", "holds no user ids")):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        result = CliRunner().invoke(app, ["party", "users", str(bad), "--url", party.url, "--token", ADMIN])
        assert result.exit_code == 1 and says in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert party.admin.get("/v1/counts").json()["users"] == 0
    ok = tmp_path / "ok.txt"
    ok.write_text("a\n")
    result = CliRunner().invoke(app, ["party", "users", str(ok), "--url", party.url, "--token", "wrong"])
    assert result.exit_code == 1 and "refused the credential" in result.output
