"""Same training in-process and over HTTP (coordinator + party processes on loopback), any registered protocol.

--protocol fedpergnn runs the FedPerGNN baseline through the same engine (in-process: the registry's
plan over in-process links, seeded as the HTTP parties seed themselves).

Prints one JSON line: seconds of the training rounds each way, their ratio, bytes per round per
party, and both test RMSEs (same seeds, so they should agree to 4 decimals).

With --secure-aggregation both runs mask every per-party message (the coordinator sees sums only),
and a second HTTP run on the same party processes, the same seeds and secure aggregation off gives
"bytes_per_round_per_party_plain", "seconds_plain" and "rmse_plain" beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from cli.localfed import CoordinatorClient, coordinator_proc, load_party, party_proc
from services.crypto.secagg import SecAggParty
from services.data.movielens import load_ml100k
from services.data.splits import vertical_split_dataset
from services.evaluation.runner import PRESETS, preset_values
from services.federation import registry
from services.federation.inprocess import InProcessRun
from services.federation.plan import Seeds
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.reference import party_datas, run_reference
from services.verfedgnn.secure import dev_party_secret


def main(argv: list[str] | None = None) -> None:
    """Run both transports and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--preset", default="tuned", choices=sorted(PRESETS),
                    help="engine settings (services/evaluation/runner.py); fixed rounds, no early stopping")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--party-threads", type=int, default=1,
                    help="torch threads per party process (parties run in parallel on the same cores)")
    ap.add_argument("--protocol", default="verfedgnn", choices=["verfedgnn", "fedpergnn"],
                    help="the registered protocol to run (fedpergnn: the baseline, over HTTP through the same engine)")
    ap.add_argument("--secure-aggregation", action="store_true",
                    help="mask every per-party message; also run the same HTTP training unmasked for comparison")
    ap.add_argument("--train-workers", type=int, default=1,
                    help="PARTY_TRAIN_WORKERS of every party process: each trains on that many torch.distributed "
                         "ranks (docs/distributed.md); the in-process reference is one process")
    args = ap.parse_args(argv)
    ds = load_ml100k(args.data, split=args.split)
    parts = {f"party{k}": p for k, p in enumerate(vertical_split_dataset(ds, args.parties, seed=args.seed))}
    cfg = {k: v for k, v in preset_values(args.preset, args.model).items() if k not in ("rounds", "patience")}
    cfg |= {"patience": args.rounds}  # fixed rounds: both runs do exactly --rounds
    cfg |= {"secure_aggregation": args.secure_aggregation}
    config = TrainConfig(**cfg, seed=args.seed, rounds=args.rounds)
    torch.set_num_threads(args.party_threads)  # the same torch threads as each party process
    if args.protocol == "fedpergnn":
        cfg = {"protocol": "fedpergnn", "train": cfg}
        ref = _fedpergnn_reference(parts, cfg, args)
    else:
        ref = run_reference(parties=parts, config=config, rounds=args.rounds)
    print(f"in-process: {ref.seconds:.2f}s, test RMSE {ref.test_rmse:.4f}", file=sys.stderr)

    root = Path(tempfile.mkdtemp(prefix="fedrec-bench-"))
    threads = {"OMP_NUM_THREADS": str(args.party_threads)}
    procs = [party_proc(p, root, extra_env={**threads, "PARTY_TRAIN_WORKERS": str(args.train_workers)})
             for p in parts]
    coord = coordinator_proc(root, extra_env={"COORD_PAUSE_POLL_S": "0.5", **threads})
    try:
        for proc in [*procs, coord]:
            proc.start()
        http = httpx.Client(timeout=300)
        cc = CoordinatorClient(coord.url)
        for proc, (pid, ds_p) in zip(procs, parts.items()):
            load_party(http, proc.url, ds_p)
            cc.register(pid, proc.url)
        started = time.perf_counter()
        status = _http_run(cc, args, cfg)
        total = time.perf_counter() - started
        plain = _http_run(cc, args, {**cfg, "secure_aggregation": False}) if args.secure_aggregation else None
    finally:
        for proc in [coord, *procs]:
            proc.stop()
    rounds = status["rounds"]
    seconds_http = sum(r["seconds"] for r in rounds)
    per_party = _bytes_per_round(rounds, parts)
    extra: dict[str, object] = {}
    if plain is not None:
        plain_bytes = _bytes_per_round(plain["rounds"], parts)
        seconds_plain = sum(r["seconds"] for r in plain["rounds"])
        extra = {"bytes_per_round_per_party_plain": round(sum(plain_bytes.values()) / len(plain_bytes)),
                 "seconds_plain": round(seconds_plain, 3),
                 "rmse_plain": round(plain["rounds"][-1]["metrics"]["test_rmse"], 6),
                 "ratio_masked_over_plain": round(seconds_http / seconds_plain, 3)}
    print(json.dumps({
        "protocol": args.protocol, "secure_aggregation": args.secure_aggregation,
        "data": f"ml-100k/{args.split}", "parties": args.parties, "model": args.model, "rounds": args.rounds,
        "preset": args.preset, "seed": args.seed, "party_threads": args.party_threads,
        "train_workers": args.train_workers, "seconds_inprocess": round(ref.seconds, 3), "seconds_http": round(seconds_http, 3),
        "ratio": round(seconds_http / ref.seconds, 3), "seconds_http_total_with_psi_and_setup": round(total, 3),
        "bytes_per_round_per_party": round(sum(per_party.values()) / len(per_party)),
        "bytes_per_round_by_party": {p: round(v) for p, v in per_party.items()},
        "rounds_with_failures": sum(1 for r in rounds if r["failures"]),
        "rmse_inprocess": round(ref.test_rmse, 6), "rmse_http": round(rounds[-1]["metrics"]["test_rmse"], 6),
        **extra,
    }))


@dataclass
class _Ref:
    seconds: float
    test_rmse: float


def _fedpergnn_reference(parts: dict[str, Any], cfg: dict[str, Any], args: argparse.Namespace) -> _Ref:
    """FedPerGNN in one process through the registry's plan, seeded as the HTTP parties seed themselves."""
    plan = registry.plan("fedpergnn")
    config = plan.config(cfg, seed=args.seed, rounds=args.rounds)
    datas = party_datas(parts)
    sec = {p: SecAggParty(party_id=p, secret=dev_party_secret(p), run_id="reference") for p in datas}
    seeds = {p: Seeds(0, s.derived_seed("local", args.seed)) for p, s in sec.items()}
    started = time.perf_counter()
    run = InProcessRun(plan=plan, config=config, datas=datas, seeds=seeds, secagg=sec)
    history = [run.run_round(t) for t in range(args.rounds)]
    return _Ref(time.perf_counter() - started, float(history[-1].rmse["test"]))


def _http_run(cc: CoordinatorClient, args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, Any]:
    """One coordinator run to the end (fixed rounds); exits if it does not complete."""
    # the preset named too: settings the config leaves unset come from it (not from the default tuned-ranking)
    run = cc.create_run(rounds=args.rounds, min_parties=args.parties, seed=args.seed, preset=args.preset, config=cfg)
    # Each status answer carries every round so far: polling it at 10 Hz costs the coordinator
    # O(rounds) CPU per poll on the cores the parties train on, so poll slowly here.
    status = cc.wait(run["run_id"], timeout=3600, poll_s=1.0)
    if status["state"] != "completed":
        raise SystemExit(f"HTTP run ended {status['state']}: {status['detail']}")
    return status


def _bytes_per_round(rounds: list[dict[str, Any]], parts: dict[str, Any]) -> dict[str, float]:
    """Bytes each party sent and received per round (request and response bodies)."""
    return {p: sum(r["bytes_sent"].get(p, 0) + r["bytes_received"].get(p, 0) for r in rounds) / len(rounds)
            for p in parts}


if __name__ == "__main__":
    main()
