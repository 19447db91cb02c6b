"""`fedrec data`: synthesise data sets and split real ones vertically into party CSVs."""

from __future__ import annotations

import json
import time
from functools import reduce
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from services.data.csv import write_links_csv, write_ratings_csv
from services.data.formats import FORMATS, detect_format, load_all
from services.data.movielens import read_ml1m_genres, read_ml100k_genres
from services.data.parsing import DataFormatError, concat_ratings
from services.data.splits import assign_parties, implicit_feedback, keep_users, split_by_party
from services.data.synthetic import generate
from services.data.types import Dataset


def _say(message: str) -> None:
    """Progress on stderr so stdout stays clean for scripts."""
    typer.echo(message, err=True)


def _parse_floats(text: str | None, what: str) -> list[float] | None:
    """'0.2,0.8' -> [0.2, 0.8]; a clear CLI error otherwise."""
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what} must be comma-separated numbers, got {text!r}") from None


def _genres(path: Path, fmt: str) -> dict[str, str]:
    """Primary genre of each MovieLens item (the only formats with genres)."""
    if fmt == "ml-100k":
        return read_ml100k_genres(path)
    if fmt == "ml-1m":
        return read_ml1m_genres(path)
    raise typer.BadParameter(f"--by genre needs MovieLens (ml-100k or ml-1m), not {fmt}")


def _write_parties(
    ds: Dataset,
    n_parties: int,
    seed: int,
    shares: list[float] | None,
    out: Path,
    *,
    overlap: float = 1.0,
    genres: dict[str, str] | None = None,
    implicit: float | None = None,
) -> dict:
    """Assign items (at random or by genre) and users to parties; write party<k>.csv (+ social.csv) and manifest.json."""
    whole = concat_ratings([r for r in (ds.train, ds.valid, ds.test) if r is not None])
    n_input = len(whole)
    if implicit is not None:
        whole = implicit_feedback(whole, implicit)
    full = Dataset(ds.name, whole, whole.subset(np.zeros(0, dtype=np.int64)), None)
    items = np.unique(whole.item_ids)
    try:
        parties, users, owner = assign_parties(items, np.unique(whole.user_ids), n_parties, seed=seed, shares=shares,
                                               overlap=overlap, genres=genres)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for k, part in enumerate(split_by_party(full, parties)):
        path = out / f"party{k}.csv"
        kept = keep_users(part.train, users[k])
        rows = write_ratings_csv(path, kept)
        n_users = int(np.unique(kept.user_ids).size)  # users with a rating in the file
        files.append(
            {"party": k, "file": path.name, "items": int(parties[k].size), "users": n_users, "ratings": rows}
        )
        _say(f"  wrote {path} ({rows:,} ratings, {parties[k].size:,} items, {n_users:,} users)")
    manifest: dict = {
        "name": ds.name,
        "parties": files,
        "seed": seed,
        "rating_min": ds.rating_min,
        "rating_max": ds.rating_max,
        "users": int(np.unique(whole.user_ids).size),
        "ratings": sum(f["ratings"] for f in files),
        "overlap": overlap,
        "shared_users": int(reduce(np.intersect1d, users).size),  # assigned to every party (--overlap)
        "by": "random" if genres is None else "genre",
        "feedback": "explicit" if implicit is None else "implicit",
    }
    if owner is not None:
        manifest["genre_parties"] = owner
    if implicit is not None:
        # Every kept row is written with rating 1.0 (an interaction), which a party on the default 1-5 scale accepts.
        manifest.update(rating_min=1.0, rating_max=1.0, implicit_threshold=implicit, input_ratings=n_input)
    if ds.social is not None:
        n_links = write_links_csv(out / "social.csv", ds.social)
        manifest["social"] = {"file": "social.csv", "links": n_links}
        _say(f"  wrote {out / 'social.csv'} ({n_links:,} links)")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def synth(
    out: Annotated[Path, typer.Option(help="output directory")],
    users: Annotated[int, typer.Option(min=1)] = 1000,
    items: Annotated[int, typer.Option(min=1)] = 500,
    ratings: Annotated[int, typer.Option(min=1)] = 20_000,
    parties: Annotated[int, typer.Option(min=1)] = 2,
    seed: Annotated[int, typer.Option()] = 0,
    social: Annotated[
        bool, typer.Option("--social/--no-social", help="also write social.csv")
    ] = False,
    scale: Annotated[str, typer.Option(help="rating range 'lo,hi'")] = "1,5",
    step: Annotated[float, typer.Option(help="rating step (1 or 0.5)")] = 1.0,
    shares: Annotated[
        str | None, typer.Option(help="item shares per party, e.g. '0.2,0.8'")
    ] = None,
) -> None:
    """Generate a synthetic data set and write one ratings CSV per party (+ social links)."""
    lo_hi = _parse_floats(scale, "--scale")
    if lo_hi is None or len(lo_hi) != 2:
        raise typer.BadParameter("--scale must be 'lo,hi'")
    _say(f"generating {users:,} users x {items:,} items, {ratings:,} ratings (seed {seed}) ...")
    start = time.perf_counter()
    try:
        ds = generate(
            users,
            items,
            ratings,
            seed=seed,
            social=social,
            rating_scale=(lo_hi[0], lo_hi[1]),
            rating_step=step,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    _say(f"generated in {time.perf_counter() - start:.1f}s; writing {parties} party files to {out}")
    manifest = _write_parties(ds, parties, seed, _parse_floats(shares, "--shares"), out)
    typer.echo(json.dumps({"out": str(out), "ratings": manifest["ratings"], "parties": parties}))


def split(
    path: Annotated[Path, typer.Argument(help="data set directory or file")],
    out: Annotated[Path, typer.Option(help="output directory")],
    parties: Annotated[int, typer.Option(min=1)] = 2,
    seed: Annotated[int, typer.Option()] = 0,
    fmt: Annotated[
        str | None, typer.Option("--format", help=f"one of {', '.join(FORMATS)}")
    ] = None,
    shares: Annotated[
        str | None, typer.Option(help="item shares per party, e.g. '0.2,0.8' (--by random)")
    ] = None,
    overlap: Annotated[
        float,
        typer.Option(help="share of users kept at every party (0 < F <= 1); each other user goes to one party"),
    ] = 1.0,
    by: Annotated[
        str, typer.Option(help="item split: 'random', or 'genre' (MovieLens: whole primary-genre groups per party)")
    ] = "random",
    implicit: Annotated[
        float | None,
        typer.Option(help="ratings >= THRESHOLD become interactions (rating 1.0), the rest are dropped"),
    ] = None,
) -> None:
    """Split a data set vertically (items at random or by genre over parties) into per-party ratings CSVs."""
    if not 0.0 < overlap <= 1.0:
        raise typer.BadParameter(f"--overlap must be in (0, 1], got {overlap}")
    if by not in ("random", "genre"):
        raise typer.BadParameter(f"--by must be 'random' or 'genre', got {by!r}")
    try:
        kind = fmt or detect_format(path)
        ds = load_all(path, kind)
        genres = _genres(path, kind) if by == "genre" else None
    except (DataFormatError, ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    _say(
        f"read {len(ds.train):,} ratings from {path} ({ds.meta['format']}); "
        f"splitting over {parties} parties"
    )
    manifest = _write_parties(ds, parties, seed, _parse_floats(shares, "--shares"), out,
                              overlap=overlap, genres=genres, implicit=implicit)
    typer.echo(json.dumps({"out": str(out), "ratings": manifest["ratings"], "parties": parties}))


def register(app: typer.Typer) -> None:
    """Attach the data commands to the root CLI."""
    sub = typer.Typer(
        help="Synthesise data sets and split them vertically over parties.", no_args_is_help=True
    )
    sub.command("synth")(synth)
    sub.command("split")(split)
    app.add_typer(sub, name="data")
