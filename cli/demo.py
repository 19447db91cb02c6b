"""`fedrec demo`: a coordinator and three parties as separate processes on loopback, trained end to end."""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.http import checked
from cli.localfed import (
    ADMIN,
    API_KEY,
    CoordinatorClient,
    LocalTLS,
    coordinator_proc,
    load_party,
    party_proc,
)
from services.data.types import Dataset
from services.errors import DomainError
from services.evaluation.report import RANKING_COLUMNS
from services.evaluation.runner import preset_values
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.reference import party_datas

# Piped into a file or CI log there is no terminal width: rich would wrap the tables at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 140)
SERVED = "federated (served over HTTP, merged lists)"
MOST_POPULAR = "most popular"
EASE = "EASE (λ on validation)"


def _dataset(data: Path | None, seed: int) -> Dataset:
    if data is None:  # shaped like ML-100K: skewed popularity, long-tailed counts, tastes shared by the parties
        from services.data.tastes import generate_tastes
        return generate_tastes(seed=seed, name="synthetic-demo")
    from services.data.movielens import load_ml100k
    from services.evaluation.harness import ensure_validation
    return ensure_validation(load_ml100k(data, split="u1"), fraction=0.1, seed=seed)


def _baselines(parts: dict[str, Dataset], config: TrainConfig
               ) -> tuple[dict[str, float], float, dict[str, dict[str, dict[str, float]]], dict[str, dict[str, float]]]:
    """In-process references: each party alone (RMSE; top-K on its own catalogue, the GNN and its own EASE) and,
    on the merged catalogue, the centralized GNN, most-popular and EASE."""
    import torch

    from services.evaluation import ranking_baselines, topk
    from services.evaluation import ranking_experiment as rx
    from services.evaluation.harness import Federation, alone, merge_parties
    torch.set_num_threads(1)  # the same one thread per process as the party services
    datas = party_datas(parts)
    view = topk.ranking_view(datas)
    mean = rx.global_mean(datas)
    off = config.model_copy(update={"use_projection": False, "use_quantization": False})
    local: dict[str, float] = {}
    own: dict[str, dict[str, float]] = {}
    own_ease: dict[str, dict[str, float]] = {}
    for p, d in datas.items():
        run = topk.train_ranked({p: alone(d)}, config=off, global_mean=mean, protocol="local")
        local[p] = run.result.rmse
        own[p] = {**topk.evaluate_party(view, p, run.scores()[p]), "rmse": run.result.rmse}
        solo = rx.central_implicit(topk.ranking_view({p: d}), {p: d})  # the party's own EASE, its catalogue only
        own_ease[p] = topk.evaluate_party(view, p, ranking_baselines.ease(solo)[0])
    fed = Federation(list(datas.values()), next(iter(datas.values())).n_users, mean)
    run = topk.train_ranked({"central": merge_parties(fed)}, config=off, global_mean=mean, protocol="centralized")
    central = {**topk.evaluate_central(view, run.scores()["central"]), "rmse": run.result.rmse}
    merged = {"centralized GNN (same objective)": central}
    implicit = rx.central_implicit(view, datas)
    merged[MOST_POPULAR] = topk.evaluate_central(view, ranking_baselines.most_popular(implicit))
    merged[EASE] = topk.evaluate_central(view, ranking_baselines.ease(implicit)[0])
    return local, run.result.rmse, {p: {"alone": own[p], "ease": own_ease[p]} for p in own}, merged


def _ranking_table(title: str, groups: list[dict[str, dict[str, float]]]) -> Table:
    """Rows of top-K figures under RANKING_COLUMNS, one table section per group."""
    table = Table(title=title)
    table.add_column("model")
    for c in RANKING_COLUMNS:
        table.add_column(c.replace("median_train_count", "median #train"), justify="right")
    table.add_column("test RMSE", justify="right")
    for g, rows in enumerate(groups):
        for n, (name, r) in enumerate(rows.items()):
            table.add_row(name, *[f"{r[c]:.3f}" if c != "median_train_count" else f"{r[c]:.0f}"
                                  for c in RANKING_COLUMNS], f"{r['rmse']:.4f}" if "rmse" in r else "",
                          end_section=n == len(rows) - 1 and g < len(groups) - 1)
    return table


def _merged_verdict(rows: dict[str, dict[str, float]]) -> str:
    """Whether the served merged list's NDCG@10 is above most-popular's and EASE's."""
    fed = rows[SERVED]["ndcg@10"]
    behind = [n for n in (MOST_POPULAR, EASE) if rows[n]["ndcg@10"] >= fed]
    # four digits: the table's three can show a tie where the comparison is not one
    return (f"merged list NDCG@10 {fed:.4f} (most popular {rows[MOST_POPULAR]['ndcg@10']:.4f}, EASE "
            f"{rows[EASE]['ndcg@10']:.4f}): " + ("ahead of both" if not behind
                                               else f"[red]not ahead of {' and '.join(behind)}[/red]"))


def _party_verdict(own: dict[str, dict[str, dict[str, float]]]) -> str:
    """For how many parties the served list beats the party alone (its GNN and its EASE) on its own catalogue."""
    wins = [p for p, r in own.items() if r["federated"]["ndcg@10"] > max(r["alone"]["ndcg@10"], r["ease"]["ndcg@10"])]
    return (f"on its own catalogue, the served list beats the party alone (GNN and EASE) for {len(wins)}/{len(own)} "
            "parties (NDCG@10)" + ("" if len(wins) == len(own) else " [red](not all)[/red]"))


def _ranking(merged: dict[str, dict[str, float]], own: dict[str, dict[str, dict[str, float]]]) -> None:
    """Two like-with-like tables: the merged list vs its baselines; each party alone vs federated on its catalogue."""
    console.print(_ranking_table("top-K of the merged list, on every party's items (relevant = test rating ≥ 4; "
                                 "candidates = items not rated in training)", [merged]))
    console.print(_merged_verdict(merged))
    console.print(_ranking_table(
        "top-K of each party's own list, on that party's items only: the party alone vs the same party federated",
        [{f"{p} alone: GNN (local-only, in-process)": r["alone"], f"{p} alone: EASE (in-process)": r["ease"],
          f"{p} served by {p} (federated + its EASE)": r["federated"]}
         for p, r in own.items()]))
    console.print(_party_verdict(own))


def _titles(data: Path | None) -> dict[str, str]:
    """ML-100K u.item titles by item id (latin-1, '|'-separated); none for the synthetic data."""
    path = data / "u.item" if data is not None else None
    if path is None or not path.exists():
        return {}
    lines = path.read_text(encoding="latin-1").splitlines()
    return {f[0]: f[1] for f in (line.split("|") for line in lines) if len(f) > 1}


def _load_titles(http: httpx.Client, url: str, ds: Dataset, titles: dict[str, str]) -> int:
    """POST /v1/items with the titles of this party's own items (never another party's catalogue)."""
    own = sorted({str(i) for s in (ds.train, ds.valid, ds.test) if s is not None for i in s.item_ids.tolist()})
    rows = [{"external_id": i, "metadata": {"title": titles[i]}} for i in own if i in titles]
    for start in range(0, len(rows), 1000):
        checked(http.post(f"{url}/v1/items", json={"rows": rows[start:start + 1000]},
                          headers={"Authorization": f"Bearer {ADMIN}"}))
    return len(rows)


def _catalogue(ds: Dataset) -> list[str]:
    """A party's item ids in its local column order (sorted, as the parties load them)."""
    return sorted({str(i) for s in (ds.train, ds.valid, ds.test) if s is not None for i in s.item_ids.tolist()})


def _fetch_lists(http: httpx.Client, url: str, users: list[str], rows: list[int], column: dict[tuple[str, str], int],
                 party: str | None = None) -> dict[int, list[int]]:
    """Each row's top-20 from `url` (the coordinator's fan-out, or one party's own list when `party` is set)."""
    lists: dict[int, list[int]] = {}
    partial = 0
    for row in rows:
        body = checked(http.get(f"{url}/v1/users/{users[row]}/recommendations", params={"k": 20},
                                headers={"X-API-Key": API_KEY}))
        lists[row] = [column[(party or it["party_id"], it["item_id"])] for it in body["items"]]
        partial += bool(body.get("partial"))
    if partial:  # a party missed the fan-out deadline (COORD_FANOUT_TIMEOUT_S): those lists lack its items
        console.print(f"[yellow]{partial}/{len(lists)} merged lists were partial[/yellow]")
    return lists


def _served_figures(http: httpx.Client, url: str, party_urls: dict[str, str], parts: dict[str, Dataset]
                    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Top-K figures of the lists apps get: every scored user's top-20 through the coordinator's fan-out (merged
    catalogue), and each party's own top-20 from that party (its catalogue only)."""
    from services.evaluation import ranking, topk
    view = topk.ranking_view(party_datas(parts))
    users = sorted(set.intersection(*[{str(u) for s in (d.train, d.valid, d.test) if s is not None
                                       for u in s.user_ids.tolist()} for d in parts.values()]))
    local = {p: {(p, it): j for j, it in enumerate(_catalogue(parts[p]))} for p in view.party_ids}
    merged_cols = {key: view.offsets[p] + j for p in view.party_ids for key, j in local[p].items()}
    lists = _fetch_lists(http, url, users, list(view.relevant), merged_cols)
    merged = ranking.evaluate_lists(lists, view.relevant, n_items=view.seen.shape[1], train_counts=view.train_counts)
    own = {}
    for p in view.party_ids:
        seen, relevant, counts = view.restricted(p)
        lists = _fetch_lists(http, party_urls[p], users, list(relevant), local[p], party=p)
        own[p] = ranking.evaluate_lists(lists, relevant, n_items=seen.shape[1], train_counts=counts)
    return merged, own


def _train(cc: CoordinatorClient, *, rounds: int, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    run = cc.create_run(rounds=rounds, min_parties=2, seed=seed, config=config)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("federated training", total=rounds, info="aligning users (PSI)")

        def update(status: dict[str, Any]) -> None:
            info = f"{status['state']}: {status['detail']}"  # the best validation figures and what is left
            bar.update(task, completed=status["rounds_done"], info=info)

        return cc.wait(run["run_id"], timeout=1800, on_poll=update)


def demo(
    data: Annotated[Path | None, typer.Option(help="MovieLens-100K directory (default: synthetic demo data)")] = None,
    rounds: Annotated[int | None, typer.Option(min=1, help="at most this many rounds (default 300; early "
                                                        "stopping as the preset says)")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    keep: Annotated[bool, typer.Option(help="keep the temp directory with the databases and logs")] = False,
    tls: Annotated[bool, typer.Option(help="HTTPS everywhere with a development CA made for the demo; parties "
                                           "require client certificates (mutual TLS)")] = False,
    party_workers: Annotated[int, typer.Option(min=1, max=16, help="API worker processes per party; above 1 each "
                                                                    "party also runs one federation process")] = 1,
    port_base: Annotated[int | None, typer.Option(min=1024, max=65_000, envvar="FEDREC_DEMO_PORT_BASE", help=(
        "bind fixed loopback ports from N: the coordinator N, the parties N+1..N+3, their federation processes "
        "(--party-workers > 1) N+4..N+6; default: ports the OS picks"))] = None,
) -> None:
    """Start a coordinator and three parties, load data over HTTP, align, train, compare, recommend."""
    started = time.perf_counter()
    warnings.filterwarnings("ignore", category=UserWarning, module="models")  # torch sparse beta notices
    from services.data.splits import vertical_split_dataset
    ds = _dataset(data, seed)
    parts = {f"party{k}": p for k, p in enumerate(vertical_split_dataset(ds, 3, seed=seed))}
    root = Path(tempfile.mkdtemp(prefix="fedrec-demo-"))
    certs = LocalTLS.create(root / "certs", list(parts)) if tls else None
    ports = demo_ports(port_base, list(parts))
    procs = {p: party_proc(p, root, tls=certs, workers=party_workers, port=ports[p],
                           extra_env={"PARTY_FEDERATION_PORT": str(ports[f"{p}.federation"])} if port_base else None)
             for p in parts}
    coord = coordinator_proc(root, extra_env={"COORD_PAUSE_POLL_S": "0.5"}, tls=certs, port=ports["coordinator"])
    # The operator's clients: trust the demo's CA and present a certificate it signed (parties require one).
    verify = certs.client_context() if certs else True
    rounds = rounds or 300
    # the ranking-capable model with the tuned preset: one run serves ratings and the top-K
    config = {k: v for k, v in preset_values("tuned-ranking", "gcn").items() if k != "rounds"}
    titles = _titles(data)
    try:
        with console.status("starting coordinator and 3 parties (separate processes)..."):
            for proc in [*procs.values(), coord]:
                proc.start(timeout=180)  # a party with API workers starts its federation process first
        if party_workers > 1:
            console.print(f"each party: {party_workers} API workers beside one federation process (loopback)")
        if certs:
            console.print(f"TLS: development CA {certs.ca}; parties require client certificates (mutual TLS)")
        http = httpx.Client(timeout=300, verify=verify)
        cc = CoordinatorClient(coord.url, http=httpx.Client(timeout=60, verify=verify))
        for pid, ds_p in parts.items():
            n = load_party(http, procs[pid].url, ds_p)
            named = _load_titles(http, procs[pid].url, ds_p, titles)
            cc.register(pid, procs[pid].url, tls_name=pid if certs else None)  # pinned to its own certificate
            console.print(f"{pid}: {n} ratings ingested at {procs[pid].url}" + (f", {named} item titles" if named else ""))
        status = _train(cc, rounds=rounds, seed=seed, config=config)
        if status["state"] != "completed":
            raise typer.Exit(f"run ended {status['state']}: {status['detail']}")  # type: ignore[arg-type]
        console.print(f"run {status['run_id']}: {status['detail']} ({status['n_users']} users aligned by PSI)")
        traffic = ", ".join(f"{p} {status['bytes_sent'][p] / 1e6:.2f} MB down / {status['bytes_received'][p] / 1e6:.2f} MB up"
                            for p in sorted(status["bytes_sent"]))
        console.print(f"traffic (coordinator view, whole run): {traffic}")
        _recommend(http, coord.url, parts, titles)
        urls = {p: procs[p].url for p in parts}
        with console.status("fetching every test user's top-20 through the coordinator and from each party..."):
            served, served_own = _served_figures(http, coord.url, urls, parts)
        with console.status("training the baselines in-process (each party alone, centralized, most-popular, EASE)..."):
            local, central, alone_own, merged = _baselines(parts, TrainConfig(**config, seed=seed, rounds=rounds))
        errors = _served_errors(http, urls, parts)
        fed_rmse = {p: part_rmse(e) for p, e in errors.items()}
        pooled = pooled_rmse(errors)  # the same served predictions, pooled: within the range of its parts
        merged = {SERVED: {**served, "rmse": pooled}, **merged}
        _ranking(merged, {p: {**alone_own[p], "federated": {**served_own[p], "rmse": fed_rmse[p]}} for p in parts})
        _table(status, local, central, fed_rmse, pooled)
        _value_report(http, coord.url, status["run_id"])
    finally:
        with console.status("shutting down"):
            for proc in [coord, *procs.values()]:
                proc.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            console.print(f"databases and logs kept in {root}")
    console.print(f"demo finished in {time.perf_counter() - started:.0f}s")


def demo_ports(base: int | None, parties: list[str]) -> dict[str, int | None]:
    """The demo's ports: from `base` in a fixed order (coordinator, parties, their federation processes), or
    None each (the OS picks)."""
    names = ["coordinator", *parties, *(f"{p}.federation" for p in parties)]
    return {name: None if base is None else base + k for k, name in enumerate(names)}


def part_rmse(errors: tuple[float, int]) -> float:
    """RMSE of one party's served test predictions from (sum of squared errors, count)."""
    sse, n = errors
    return math.sqrt(sse / n) if n else math.nan


def pooled_rmse(errors: dict[str, tuple[float, int]]) -> float:
    """The parties' served test predictions pooled (one RMSE over every test rating): it lies between the
    smallest and the largest party's figure, as a pooled RMSE of one model must."""
    n = sum(c for _, c in errors.values())
    return math.sqrt(sum(s for s, _ in errors.values()) / n) if n else math.nan


def _served_errors(http: httpx.Client, urls: dict[str, str], parts: dict[str, Dataset]) -> dict[str, tuple[float, int]]:
    """Each party's (sum of squared errors, count) on its test ratings, of the served release's predictions,
    asked of its own serving endpoint.

    Under secure aggregation (the default) the coordinator only sees the parties' summed metrics,
    so the per-party figure comes from where the party itself would compute it.
    """
    out: dict[str, tuple[float, int]] = {}
    for pid, ds in parts.items():
        pairs = [{"user_id": str(u), "item_id": str(i)} for u, i in zip(ds.test.user_ids.tolist(), ds.test.item_ids.tolist())]
        predicted: list[float] = []
        for start in range(0, len(pairs), 10_000):
            body = checked(http.post(f"{urls[pid]}/v1/predictions", json={"pairs": pairs[start:start + 10_000]},
                                     headers={"X-API-Key": API_KEY}))
            predicted += [float(p["rating"]) for p in body["predictions"]]
        diff = np.asarray(predicted, dtype=np.float64) - np.asarray(ds.test.ratings, dtype=np.float64)
        out[pid] = (float(np.sum(diff ** 2)), int(diff.size))
    return out


def _table(status: dict[str, Any], local: dict[str, float], central: float, fed_party: dict[str, float],
           pooled: float) -> None:
    table = Table(title="test RMSE (each party alone and centralized: round with the best validation RMSE; "
                        "federated: the served release's round, predictions asked of each party; all items: "
                        "those predictions pooled)")
    table.add_column("setting")
    for pid in local:
        table.add_column(f"{pid} items", justify="right")
    table.add_column("all items (pooled)", justify="right")
    table.add_row("federated (HTTP, 3 party processes)", *[f"{fed_party[p]:.4f}" for p in local], f"{pooled:.4f}")
    table.add_row("each party alone (in-process harness)", *[f"{v:.4f}" for v in local.values()], "")
    table.add_row("centralized (in-process harness)", *["" for _ in local], f"{central:.4f}")
    console.print(table)
    wins = [p for p in local if fed_party[p] < local[p]]
    console.print(f"federated beats the party alone for {len(wins)}/{len(local)} parties"
                  + ("" if len(wins) == len(local) else " [red](not all)[/red]"))
    if not all(math.isfinite(v) for v in fed_party.values()):
        console.print("[red]some per-party figures are missing[/red]")


def _value_report(http: httpx.Client, url: str, run_id: str) -> None:
    """The run's release's value report, as `fedrec release show` prints it (validation figures, each party's own)."""
    from cli.release import value_table, withheld_line
    listed = http.get(f"{url}/v1/releases", headers={"Authorization": f"Bearer {ADMIN}"})
    release = next((r for r in listed.json() if r["run_id"] == run_id), None) if listed.status_code == 200 else None
    held = None if release is None else release.get("value_withheld")
    if held:
        console.print(withheld_line(held), markup=False)
    if release is not None and release.get("value_report"):
        console.print(value_table(release["value_report"]))
    elif not held:
        console.print("no value report for this run's release")


def _recommend(http: httpx.Client, url: str, parts: dict[str, Dataset], titles: dict[str, str]) -> None:
    """Top-5 of a few users through the coordinator, with titles when item metadata was ingested."""
    users = sorted({str(u) for u in next(iter(parts.values())).train.user_ids.tolist()})[:3]
    for user in users:
        try:
            body = checked(http.get(f"{url}/v1/users/{user}/recommendations", params={"k": 5},
                                    headers={"X-API-Key": API_KEY}))
        except DomainError as exc:
            console.print(f"user {user}: {exc.detail}")
            continue
        missing = f" (partial: {', '.join(sorted(body['unavailable']))} did not answer)" if body.get("partial") else ""
        console.print(f"top-5 for user {user}{missing}:")
        for it in body["items"]:
            name = titles.get(it["item_id"], "")
            console.print(f"  {it['party_id']}/{it['item_id']} {name} (score {it['score']:.2f})")


def register(app: typer.Typer) -> None:
    """Attach `fedrec demo` to the root CLI."""
    app.command("demo")(demo)
