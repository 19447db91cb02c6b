"""Issue 39, Q1–Q3: a coordinator holding only its token, against three party processes outside dev mode.

Each party runs with a random secret (`PARTY_DEV_MODE=0`) and pins its two peers' identity keys
(`PARTY_PEER_IDENTITIES`); after one honest secure run through the coordinator, the test plays the
coordinator by hand over HTTP:

- Q1: three rounds at one state version over {p0,p1}, {p0,p2}, {p1,p2}, `user_emb[0,0]` nudged by
  1, 2, 3 ulp: one participant set per state version, whatever public parameters a begin carries;
- Q2: three new run ids with the same seed and config, each set up honestly (PSI, configure, peers,
  start), round 0 over one pair each: an exact value is masked for one participant set, across runs;
- Q3: the completed run re-opened with a key agreement of the target alone and a start of the target
  alone, and a new run of one: nothing is ever uploaded in the clear.

Each refusal names its rule. Every answer the attacker got goes to one oracle: the sums it can unmask
(masked uploads, and t shares of each survivor's self-mask seed and of one step key per pairwise mask
left), as rows over the parties' values; no party's value may lie in their span.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from cli.localfed import COORD_TOKEN, Proc, party_proc
from services.coordinator.client import PartyClient, TrafficCounter
from services.coordinator.psi import align_users
from services.coordinator.registry import PartyEndpoint
from services.coordinator.runner import RunManager, train_config
from services.crypto.secagg import SecAggParty, decode_fixed
from services.federation import registry
from services.federation.aggregation import MaskedSum, inputs_digest
from services.federation.links import Message, Step
from services.federation.messages import ConfigureRequest, PeersRequest, StartRequest
from services.protocol.federation import unpack_tree
from tests.security.test_n32_active_coordinator import FAST, NAMES, Attacker, T, refused
from tests.support.federation import TINY_CONFIG, process_federation, tiny_parties

PAIRS = (["p0", "p1"], ["p0", "p2"], ["p1", "p2"])
STEP = "projection"  # layer 0: a GCN layer-0 contribution reads no public parameter


@dataclass
class Held:
    """One masked attempt as the attacker holds it: whose value, the set it was masked with, who uploaded
    a masked vector, and the recovery answers (shares) it got."""

    value: str  # which value of each party the uploads carry (the same tag: the same exact value)
    names: list[str]
    round_index: int = 0
    opened: dict[str, Message] = field(default_factory=dict)  # begin answers (step keys, sealed shares)
    uploads: dict[str, np.ndarray] = field(default_factory=dict)  # masked vectors, by party
    shares: list[dict[str, Any]] = field(default_factory=list)

    @property
    def masked(self) -> set[str]:
        """The parties whose masked vector the attacker holds."""
        return set(self.uploads)


def _count(held: Held, kind: str, owner: str) -> int:
    """Distinct Shamir shares of `owner`'s self-mask seed ("seed") or step key ("key") the attacker holds."""
    got = set()
    for a in held.shares:
        share = dict(a.get(kind) or {}).get(owner)
        if share is not None:
            got.add(int(share[0]) if kind == "seed" else int(share[0][0]))
    return len(got)


def unmaskable(held: Held) -> list[tuple[str, ...]]:
    """Every set of uploads whose sum the attacker can unmask: each member's self mask (t seed shares), and
    each pairwise mask with a party outside the set (t shares of either step key)."""
    out = []
    for k in range(1, len(held.masked) + 1):
        for s in combinations(sorted(held.masked), k):
            rest = [d for d in held.names if d not in s]
            if all(_count(held, "seed", u) >= T for u in s) and all(
                    _count(held, "key", u) >= T or _count(held, "key", d) >= T for u in s for d in rest):
                out.append(s)
    return out


def unmasked_sum(held: Held) -> np.ndarray:
    """The sum over the whole set, unmasked with the coordinator's own code from what the attacker holds."""
    agg = MaskedSum()
    agg.opened(Step("begin", held.round_index, 0), held.opened, holders=held.names)
    step = Step(STEP, held.round_index, 0, 0)
    size = next(iter(held.uploads.values())).size
    total = sum((held.uploads[p] for p in held.names), np.zeros(size, np.uint64))
    shares = {str(k): a for k, a in enumerate(held.shares)}
    return decode_fixed(total - agg._unmask(step, shares, held.names, [], size))


def exposed(helds: list[Held]) -> list[tuple[str, str]]:
    """(party, value) pairs that lie in the span of the sums the attacker can unmask: those it learns."""
    variables = sorted({(p, h.value) for h in helds for p in h.names})
    rows = [[float(v in {(p, h.value) for p in s}) for v in variables] for h in helds for s in unmaskable(h)]
    if not rows:
        return []
    a = np.array(rows)
    rank, unit = np.linalg.matrix_rank(a), np.eye(len(variables))
    return [v for i, v in enumerate(variables) if np.linalg.matrix_rank(np.vstack([a, unit[i]])) == rank]


def play_round(att: Attacker, round_index: int, pair: list[str], public: dict[str, np.ndarray], *,
               value: str, helds: list[Held]) -> dict[str, httpx.Response]:
    """A masked round over `pair`, as far as the parties let it go (begin, the layer-0 projection, the
    consistency round, the recovery); what the attacker got goes to `helds`; returns each party's refusal."""
    held, refusals = Held(value, pair, round_index), {}
    helds.append(held)
    opened = held.opened
    for p in pair:
        res = att.step(p, round_index, "begin", {"public": public, "participants": pair})
        if res.status_code == 200:
            opened[p] = unpack_tree(res.content)
        else:
            refusals[p] = res
    for p in opened:
        inbox = {s: opened[s]["secagg"]["sealed"][p] for s in opened if s != p}
        res = att.step(p, round_index, STEP, {"participants": pair, "sealed_in": inbox}, layer=0)
        if res.status_code == 200:
            answer = unpack_tree(res.content)
            assert set(answer) == {"masked"}, sorted(answer)  # nothing of the value in the clear
            held.uploads[p] = np.asarray(answer["masked"], np.uint64).ravel()
        else:
            refusals.setdefault(p, res)
    signed = {}
    for p in sorted(held.masked):  # every party that masked is asked to sign the whole pair as survivors
        res = att.step(p, round_index, f"consistency:{STEP}", {"survivors": pair}, layer=0)
        if res.status_code == 200:
            signed[p] = unpack_tree(res.content)
    request = {"survivors": pair, "dropped": [], "signatures": {p: a["signature"] for p, a in signed.items()},
               "repeats": {p: a.get("repeat", "") for p, a in signed.items()}}  # relayed as the runner does
    for p in sorted(held.masked):
        res = att.step(p, round_index, f"recovery:{STEP}", request, layer=0)
        if res.status_code == 200:
            held.shares.append(unpack_tree(res.content))
    return refusals


def refused_at(answers: dict[str, httpx.Response], party: str, *rule: str) -> str:
    """`party` refused its part of the round, naming the rule."""
    assert party in answers, f"{party} took part in the round; it should refuse it ({', '.join(rule)})"
    return refused(answers[party], *rule)


@dataclass
class Scene:
    """The attacker, and the honest run it watched: its resolved config, seed and user count."""

    attacker: Attacker
    run: dict[str, Any]

    def configure_body(self, run_id: str, seed: int) -> dict[str, Any]:
        """The configure request the coordinator's runner sends for this run's config and `seed`."""
        config = train_config(self.run["config"], seed=seed, rounds=self.run["rounds_total"])
        protocol = registry.protocol_of(self.run["config"])
        settings = {"protocol": protocol, **config.model_dump(exclude={"seed", "rounds", "projection_seed"})}
        return ConfigureRequest(run_id=run_id, config=settings, seed=registry.plan(protocol).seed(config)
                                ).model_dump(mode="json", exclude={"warm_start"})

    def public(self, n_users: int) -> dict[str, np.ndarray]:
        """The run's public parameters as its engine initialises them (the coordinator knows them)."""
        from models.vertical import build_public
        from services.verfedgnn.config import model_config, run_config

        config = run_config(dict(TINY_CONFIG), seed=self.run["seed"], rounds=self.run["rounds_total"])
        return {k: np.asarray(v, np.float32)
                for k, v in build_public(config=model_config(config), n_users=n_users, seed=0).arrays().items()}

    def clients(self, names: list[str]) -> dict[str, PartyClient]:
        """Party clients with the coordinator's token, as the runner holds them."""
        return {p: PartyClient(PartyEndpoint(p, self.attacker.urls[p], COORD_TOKEN, "ratings", True),
                               http=self.attacker.http, counter=TrafficCounter(), max_retries=0) for p in names}

    def honest_setup(self, run_id: str, seed: int) -> int:
        """PSI, configure, key agreement and start of a new run over the three parties, as the runner does them;
        returns the aligned user count."""
        clients = self.clients(NAMES)
        n_users = align_users(clients=clients, run_id=run_id)
        request = ConfigureRequest(**self.configure_body(run_id, seed))
        answers = {p: c.configure(request=request) for p, c in clients.items()}
        peers = PeersRequest(announcements=[answers[p].key for p in NAMES])
        sealed = {p: c.peers(run_id=run_id, request=peers) for p, c in clients.items()}
        counts = {p: a.n_items for p, a in answers.items()}
        n = sum(a.train_count for a in answers.values())
        mean = sum(a.train_sum for a in answers.values()) / max(1, n)
        for p, c in clients.items():
            c.start(run_id=run_id, request=StartRequest(total_items=sum(counts.values()), item_counts=counts,
                                                        global_mean=mean, sealed=RunManager._sealed_for(p, sealed)))
        return n_users


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root: Path = tmp_path_factory.mktemp("q39")
    secrets = {p: os.urandom(32) for p in NAMES}
    identities = {p: SecAggParty(party_id=p, secret=secrets[p], run_id="any").identity for p in NAMES}

    def party(pid: str, where: Path) -> Proc:
        pins = {q: identities[q] for q in NAMES if q != pid}
        return party_proc(pid, where, extra_env={"PARTY_DEV_MODE": "0", "PARTY_SECRET": secrets[pid].hex(),
                                                 "PARTY_PEER_IDENTITIES": json.dumps(pins)})

    with process_federation(root, tiny_parties(3), party=party, coordinator_env=FAST) as fed:
        run = fed.client.create_run(rounds=2, min_parties=3, seed=3, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300)
        assert status["state"] == "completed", status["detail"]  # honest, every party outside dev mode
        assert run["privacy"]["secure_aggregation"]["enabled"] is True
        with httpx.Client(timeout=60) as http:
            yield Scene(Attacker({p: fed.parties[p].url for p in NAMES}, run["run_id"], {}, http), status)


def test_the_oracle_finds_a_value_in_three_pair_sums() -> None:
    # the oracle's teeth: the sums over {p0,p1}, {p0,p2}, {p1,p2} give every party's value; one of them none
    full = {"seed": {p: [1 + k, 7] for k, p in enumerate(NAMES)}, "key": {}}
    helds = [Held("v", pair, uploads={p: np.zeros(1, np.uint64) for p in pair},
                  shares=[full, {"seed": {p: [9, 7] for p in NAMES}}]) for pair in PAIRS]
    assert [unmaskable(h) for h in helds[:1]] == [[("p0", "p1")]]
    assert exposed(helds[:1]) == [] and exposed(helds[:2]) == []
    assert exposed(helds) == [(p, "v") for p in NAMES]


def test_q1_nudged_public_parameters_get_no_second_participant_set(scene: Scene) -> None:
    base = scene.public(scene.run["n_users"])
    publics = []
    for k in (1, 2, 3):  # user_emb[0,0] moved by k ulp: another digest of the begin's public parameters
        public = {n: a.copy() for n, a in base.items()}
        for _ in range(k):
            public["user_emb"][0, 0] = np.nextafter(public["user_emb"][0, 0], np.float32(np.inf))
        publics.append(public)
    assert len({inputs_digest({"public": p}) for p in publics}) == 3
    helds: list[Held] = []
    # three rounds without a finish in between: the same state version of each party
    answers = [play_round(scene.attacker, 40 + k, pair, publics[k], value="state", helds=helds)
               for k, pair in enumerate(PAIRS)]
    assert exposed(helds) == []  # no party's value in the span of the sums the attacker can form
    assert answers[0] == {}  # the first set is the value's own: masked and unmasked honestly
    assert np.abs(unmasked_sum(helds[0])).max() < 1e3  # (a real sum: the oracle counts the shares right)
    refused_at(answers[1], "p0", "one mask per value", "already masked for ['p0', 'p1']")
    refused_at(answers[2], "p1", "one mask per value", "already masked for ['p0', 'p1']")
    assert [unmaskable(h) for h in helds] == [[("p0", "p1")], [], []]  # one sum over the state version


def test_q2_new_runs_from_one_seed_start_from_other_values(scene: Scene) -> None:
    """Q2: new run ids with the same seed and config. Each party counts the masked runs it configured with a
    seed and folds the count into its projection-seed contribution, so a new run starts from other values: two
    runs over the same pair sum different values, and the three pairs' sums share no party's value (before,
    round 0 was bit for bit the same in every run, and the three pair sums gave each party's value)."""
    helds: list[Held] = []
    answers = []
    for k, pair in enumerate([PAIRS[0], PAIRS[0], PAIRS[1], PAIRS[2]]):
        run_id = f"q2-{uuid.uuid4().hex[:12]}"
        n_users = scene.honest_setup(run_id, seed=11)
        att = replace(scene.attacker, run_id=run_id)
        answers.append(play_round(att, 0, pair, scene.public(n_users), value=f"run {k}", helds=helds))
    assert answers == [{}, {}, {}, {}]  # honest set-ups: every sum is formed
    sums = [unmasked_sum(h) for h in helds]
    assert all(np.abs(s).max() < 1e3 for s in sums)  # real sums (the oracle counts the shares right)
    assert not np.allclose(sums[0], sums[1])  # the same seed and pair, a new run: other values
    assert exposed(helds) == []


def _no_value_in_the_clear(att: Attacker, target: str, round_index: int, public: dict[str, np.ndarray]) -> None:
    """The rounds the attacker can try at the target alone answer nothing (no plain upload, no masked one)."""
    helds: list[Held] = []
    refusals = play_round(att, round_index, [target], public, value="alone", helds=helds)
    assert set(refusals) == {target} and refusals[target].status_code in (404, 409), refusals[target].text
    plain = att.step(target, round_index, STEP, {"participants": [target]}, layer=0)
    assert plain.status_code in (404, 409), plain.text
    assert helds[0].masked == set() and exposed(helds) == []


def test_q3_a_secure_run_never_shrinks_to_one_party(scene: Scene) -> None:
    att, target = scene.attacker, "p0"
    # the completed run re-opened: the same configuration is answered (a coordinator resuming it) ...
    res = att.setup(target, "configure", scene.configure_body(att.run_id, scene.run["seed"]))
    assert res.status_code == 200, res.text
    own, n_items = res.json()["key"], res.json()["n_items"]
    # ... but a key agreement of the target alone, and a start of the target alone, are refused
    refused(att.setup(target, "peers", {"announcements": [own]}), "key agreement needs at least 2 parties",
            "fixed at configuration")
    refused(att.setup(target, "start", {"total_items": n_items, "item_counts": {target: n_items},
                                        "global_mean": 3.0}), "never runs with this party alone")
    _no_value_in_the_clear(att, target, 60, scene.public(scene.run["n_users"]))
    # a new run of one at a party outside dev mode: PSI and configure alone, then no key agreement, no start
    alone = replace(att, run_id=f"q3-{uuid.uuid4().hex[:12]}")
    n_users = align_users(clients=scene.clients([target]), run_id=alone.run_id)
    res = alone.setup(target, "configure", scene.configure_body(alone.run_id, scene.run["seed"]))
    assert res.status_code == 200, res.text
    own, n_items = res.json()["key"], res.json()["n_items"]
    refused(alone.setup(target, "peers", {"announcements": [own]}), "key agreement needs at least 2 parties")
    refused(alone.setup(target, "start", {"total_items": n_items, "item_counts": {target: n_items},
                                          "global_mean": 3.0}), "run of one party", "dev mode only")
    _no_value_in_the_clear(alone, target, 0, scene.public(n_users))


def test_q6_a_party_told_other_public_parameters_makes_the_attempt_unmask_nothing(scene: Scene) -> None:
    """Q6: the consistency statement binds the begin's inputs, so a signature counts only at parties told the
    same parameters: a coordinator that gives each of the three parties other public parameters (one and two
    ulp apart) gets no share from anyone, where the three signatures over the survivor set used to unmask the
    sum; and a party told other parameters than the rest (p0) does not reveal on the others' signatures."""
    run_id = f"q6-{uuid.uuid4().hex[:12]}"
    n_users = scene.honest_setup(run_id, seed=13)
    att = replace(scene.attacker, run_id=run_id)
    base = scene.public(n_users)
    publics = {}
    for k, p in enumerate(NAMES):
        publics[p] = {n: a.copy() for n, a in base.items()}
        for _ in range(k):
            publics[p]["user_emb"][0, 0] = np.nextafter(publics[p]["user_emb"][0, 0], np.float32(np.inf))
    held = Held("q6", list(NAMES), 0)
    for p in NAMES:
        res = att.step(p, 0, "begin", {"public": publics[p], "participants": list(NAMES)})
        assert res.status_code == 200, res.text
        held.opened[p] = unpack_tree(res.content)
    for p in NAMES:
        inbox = {s: held.opened[s]["secagg"]["sealed"][p] for s in NAMES if s != p}
        answer = att.ok(p, 0, STEP, {"participants": list(NAMES), "sealed_in": inbox}, layer=0)
        held.uploads[p] = np.asarray(answer["masked"], np.uint64).ravel()
    signed = {p: att.ok(p, 0, f"consistency:{STEP}", {"survivors": list(NAMES)}, layer=0) for p in NAMES}
    request = {"survivors": list(NAMES), "dropped": [], "signatures": {p: a["signature"] for p, a in signed.items()},
               "repeats": {p: a.get("repeat", "") for p, a in signed.items()}}
    for p in NAMES:
        refused(att.step(p, 0, f"recovery:{STEP}", request, layer=0), "consistency round", "1 valid signatures",
                "2 needed")
    assert unmaskable(held) == []
