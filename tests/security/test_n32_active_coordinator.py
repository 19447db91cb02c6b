"""Issue 32: a coordinator that deviates, holding only its own credential, against three real party processes.

After an honest secure run (p0 pins its peers' identity keys; p1 and p2 trust on first use, dev mode),
the test plays the coordinator by hand over HTTP, as the third probe did:

1. different dropout splits per party (the target told "you alone survived", each other party "the
   target and you survived") — the consistency round refuses it;
2. one value masked for three participant sets in three rounds — one mask per state version refuses it; and
   after a sum over two of the values, a sum over all three (one value more) — fresh values refuses it;
3. a re-configure with a sybil — the run is configured once, its peer set is fixed, pinned identities
   accept no new id, and rounds refuse participants outside the peer set.

Each refusal names its rule, and every answer is checked: the shares the parties gave never suffice to
rebuild a party's own value (its self-mask seed and, for each peer, one of the two step keys).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from cli.localfed import COORD_TOKEN, Proc, party_proc
from services.crypto.secagg import SecAggParty
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.secure import dev_party_secret
from tests.support.federation import TINY_CONFIG, process_federation, tiny_parties

NAMES = ["p0", "p1", "p2"]
T = 2  # the threshold of three parties
FAST = {"COORD_MAX_RETRIES": "1", "COORD_RETRY_BACKOFF_S": "0.05", "COORD_PAUSE_POLL_S": "0.2",
        "COORD_REQUEST_TIMEOUT_S": "30"}


def _identity(party_id: str) -> str:
    return SecAggParty(party_id=party_id, secret=dev_party_secret(party_id), run_id="any").identity


def _announcement(party_id: str, run_id: str, secret: bytes | None = None) -> dict[str, str]:
    a = SecAggParty(party_id=party_id, secret=secret or dev_party_secret(party_id), run_id=run_id).announce()
    return {"party_id": a.party_id, "dh_public": a.dh_public, "identity": a.identity, "signature": a.signature}


@dataclass
class Attacker:
    """The coordinator's credential and the parties' URLs: what a hostile coordinator holds."""

    urls: dict[str, str]
    run_id: str
    public: dict[str, np.ndarray]
    http: httpx.Client

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}

    def step(self, party: str, round_index: int, name: str, body: dict[str, Any], *, attempt: int = 0,
             layer: int = -1) -> httpx.Response:
        url = (f"{self.urls[party]}/v1/federation/runs/{self.run_id}/rounds/{round_index}/steps/{name}"
               f"?attempt={attempt}&layer={layer}")
        return self.http.post(url, headers=self.headers, content=pack_tree(body))

    def ok(self, party: str, round_index: int, name: str, body: dict[str, Any], **kw: int) -> dict[str, Any]:
        res = self.step(party, round_index, name, body, **kw)
        assert res.status_code == 200, res.text
        out: dict[str, Any] = unpack_tree(res.content)
        return out

    def setup(self, party: str, name: str, body: dict[str, Any]) -> httpx.Response:
        url = f"{self.urls[party]}/v1/federation/runs/{self.run_id}/{name}"
        return self.http.post(url, headers=self.headers, json=body)

    def begin(self, party: str, round_index: int, participants: list[str], *, attempt: int = 0) -> httpx.Response:
        return self.step(party, round_index, "begin", {"public": self.public, "participants": participants},
                         attempt=attempt)

    def masked_round(self, round_index: int, names: list[str], *, attempt: int = 0) -> None:
        """Begin a round over `names` and have each mask its layer-0 projection (the step's value)."""
        opened = {}
        for p in names:
            res = self.begin(p, round_index, names, attempt=attempt)
            assert res.status_code == 200, res.text
            opened[p] = unpack_tree(res.content)
        for p in names:
            inbox = {s: opened[s]["secagg"]["sealed"][p] for s in names if s != p}
            assert "masked" in self.ok(p, round_index, "projection", {"participants": names, "sealed_in": inbox},
                                       layer=0, attempt=attempt)


def refused(res: httpx.Response, *rule: str) -> str:
    """A 409 whose detail names the rule (every given phrase)."""
    assert res.status_code == 409, res.text
    detail = str(res.json()["detail"])
    for phrase in rule:
        assert phrase in detail, detail
    return detail


def rebuildable(target: str, answers: list[dict[str, Any]], *, names: list[str]) -> bool:
    """Whether the shares in the answers rebuild the target's value from its masked upload: t shares of its
    self-mask seed, and for each peer t shares of the target's step key or of that peer's."""
    def count(kind: str, owner: str) -> int:
        got = set()
        for a in answers:
            share = dict(a.get(kind) or {}).get(owner)
            if share is not None:
                got.add(int(share[0]) if kind == "seed" else int(share[0][0]))
        return len(got)

    return count("seed", target) >= T and all(count("key", target) >= T or count("key", v) >= T
                                               for v in names if v != target)


@pytest.fixture(scope="module")
def attacker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attacker]:
    root: Path = tmp_path_factory.mktemp("n32")
    pins = json.dumps({p: _identity(p) for p in NAMES if p != "p0"})

    def party(pid: str, where: Path) -> Proc:
        env = {"OMP_NUM_THREADS": "1", **({"PARTY_PEER_IDENTITIES": pins} if pid == "p0" else {})}
        return party_proc(pid, where, extra_env=env)

    with process_federation(root, tiny_parties(3), party=party, coordinator_env=FAST) as fed:
        run = fed.client.create_run(rounds=2, min_parties=3, seed=3, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300)
        assert status["state"] == "completed", status["detail"]  # honest, with p0's peers pinned
        assert run["privacy"]["secure_aggregation"]["enabled"] is True
        with httpx.Client(timeout=60) as http:
            yield Attacker({p: fed.parties[p].url for p in NAMES}, run["run_id"],
                           _public(status["n_users"]), http)


def _public(n_users: int) -> dict[str, np.ndarray]:
    """Public parameters of the run's shapes (the coordinator knows them; their values do not matter)."""
    from models.vertical import build_public
    from services.verfedgnn.config import model_config, run_config

    config = run_config(dict(TINY_CONFIG), seed=3, rounds=2)
    arrays = build_public(config=model_config(config), n_users=n_users, seed=0).arrays()
    return {k: np.zeros(v.shape, np.float32) for k, v in arrays.items()}


def test_different_survivor_sets_per_party_are_refused_by_the_consistency_round(attacker: Attacker) -> None:
    r, step = 10, "projection"
    attacker.masked_round(r, NAMES)
    shares: list[dict[str, Any]] = []
    # the target is told it alone survived: a set below the threshold is neither signed nor answered
    refused(attacker.step("p0", r, f"consistency:{step}", {"survivors": ["p0"]}, layer=0),
            "consistency round", "fewer than the threshold")
    refused(attacker.step("p0", r, f"recovery:{step}", {"survivors": ["p0"], "dropped": ["p1", "p2"],
                                                        "signatures": {}}, layer=0), "consistency round")
    # each other party is told "the target and you survived": each signs its own set ...
    sig = {"p1": attacker.ok("p1", r, f"consistency:{step}", {"survivors": ["p0", "p1"]}, layer=0)["signature"],
           "p2": attacker.ok("p2", r, f"consistency:{step}", {"survivors": ["p0", "p2"]}, layer=0)["signature"]}
    # ... but the target signs one survivor set per step, so only one of the two sets can reach t signatures
    sig["p0"] = attacker.ok("p0", r, f"consistency:{step}", {"survivors": ["p0", "p1"]}, layer=0)["signature"]
    refused(attacker.step("p0", r, f"consistency:{step}", {"survivors": ["p0", "p2"]}, layer=0),
            "consistency round", "already signed")
    # p2's split, shown every signature there is: only its own is over {p0, p2}
    refused(attacker.step("p2", r, f"recovery:{step}", {"survivors": ["p0", "p2"], "dropped": ["p1"],
                                                        "signatures": sig}, layer=0),
            "consistency round", "1 valid signatures", "2 needed")
    # p1's split has t signatures over one set: p0 and p1 answer that one partition, {p0, p1} | {p2}
    for p in ("p0", "p1"):
        shares.append(attacker.ok(p, r, f"recovery:{step}", {"survivors": ["p0", "p1"], "dropped": ["p2"],
                                                             "signatures": sig}, layer=0))
    # asked for another partition afterwards, or for a set they did not sign, they answer nothing
    refused(attacker.step("p1", r, f"recovery:{step}", {"survivors": NAMES, "dropped": [], "signatures": sig},
                          layer=0), "already unmasked")
    refused(attacker.step("p2", r, f"recovery:{step}", {"survivors": ["p1", "p2"], "dropped": ["p0"],
                                                        "signatures": sig}, layer=0), "consistency round")
    # what the coordinator holds unmasks the sum over {p0, p1} only: no party's own value
    for target in NAMES:
        assert not rebuildable(target, shares, names=NAMES), target


def test_one_value_is_masked_for_one_participant_set_whatever_the_round(attacker: Attacker) -> None:
    r = 20
    attacker.masked_round(r, NAMES)  # the parties' current value, masked for the three of them
    shares: list[dict[str, Any]] = []
    # rounds r+1, r+2, r+3 over {p0,p1}, {p0,p2}, {p1,p2}, without a finish in between: the same values
    for k, pair in enumerate((["p0", "p1"], ["p0", "p2"], ["p1", "p2"]), start=1):
        for p in pair:
            refused(attacker.begin(p, r + k, pair), "one mask per value", "already masked")
        refused(attacker.begin(pair[0], r, pair, attempt=k), "one mask per value")  # or as a retry of round r
    # the value's own set unmasks one sum (consistency round, then one partition): {p0, p1} with p2 dropped,
    # the sum of these same values the first test unmasked (the same survivors again are answered) ...
    signed = {p: attacker.ok(p, r, "consistency:projection", {"survivors": ["p0", "p1"]}, layer=0)
              for p in ("p0", "p1")}
    request = {"survivors": ["p0", "p1"], "dropped": ["p2"],
               "signatures": {p: a["signature"] for p, a in signed.items()},
               "repeats": {p: a["repeat"] for p, a in signed.items()}}
    for p in ("p0", "p1"):
        shares.append(attacker.ok(p, r, "recovery:projection", request, layer=0))
    # ... and no other: a new attempt over the three would sum the same values of p0 and p1 with p2's, one value
    # more than that sum (fresh values: a party reveals only for a sum with t values never unmasked before)
    attacker.masked_round(r, NAMES, attempt=4)
    signed = {p: attacker.ok(p, r, "consistency:projection", {"survivors": NAMES}, layer=0, attempt=4) for p in NAMES}
    request = {"survivors": NAMES, "dropped": [], "signatures": {p: a["signature"] for p, a in signed.items()},
               "repeats": {p: a["repeat"] for p, a in signed.items()}}
    for p in NAMES:
        refused(attacker.step(p, r, "recovery:projection", request, layer=0, attempt=4), "fresh values",
                "1 values never unmasked before (['p2'])")
    for target in NAMES:
        assert not rebuildable(target, shares, names=NAMES), target


def test_a_reconfigure_with_a_sybil_is_refused_with_and_without_pinned_identities(attacker: Attacker) -> None:
    run_id = attacker.run_id
    sybil = _announcement("p9", run_id, secret=os.urandom(32))
    real = {p: _announcement(p, run_id) for p in NAMES}
    for p in NAMES:  # a completed run is not configured again
        refused(attacker.setup(p, "configure", {"run_id": run_id, "config": {**TINY_CONFIG, "protocol": "verfedgnn"},
                                              "seed": 99}),
                "configured once")
    answers = []
    for victim in ("p0", "p1"):
        for announcements in ([real[victim], sybil], [*real.values(), sybil]):
            res = attacker.setup(victim, "peers", {"announcements": announcements})
            answers.append(res)
            if victim == "p0":  # pinned identities: no id beyond the pinned peers is accepted
                refused(res, "pinned identities", "p9")
            else:  # trust on first use (dev mode): the run's peer set was fixed at configuration
                refused(res, "peer set was fixed at configuration", "p9")
        refused(attacker.setup(victim, "start", {"total_items": 100, "item_counts": {victim: 30, "p9": 70},
                                                 "global_mean": 3.0}),
                "authenticated peers", "fixed at configuration")
        # a round over the victim and the sybil: outside the peer set
        res = attacker.begin(victim, 30, [victim, "p9"])
        answers.append(res)
        refused(res, "outside the peer set fixed at configuration", "p9")
    # no seed contribution was sealed for the sybil, and no key share left for it
    assert all("sealed" not in res.text and res.status_code == 409 for res in answers)
