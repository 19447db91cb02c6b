"""Pairwise masks cancel exactly, reveal nothing alone, recover from a drop-out; keys are authenticated; seeds agree."""

from __future__ import annotations

import numpy as np
import pytest

from services.crypto.secagg import SecAggParty, decode_fixed, encode_fixed, step_context
from services.errors import CryptoError


def parties(n: int = 3, run_id: str = "run-1") -> dict[str, SecAggParty]:
    out = {f"p{k}": SecAggParty(party_id=f"p{k}", secret=bytes([k + 1]) * 32, run_id=run_id) for k in range(n)}
    ann = [p.announce() for p in out.values()]
    for p in out.values():
        p.accept(ann)
    return out


def test_fixed_point_round_trip_and_wrapping_sum() -> None:
    x = np.array([-3.25, 0.0, 1e-6, 123456.5], dtype=np.float64)
    assert np.allclose(decode_fixed(encode_fixed(x)), x, atol=2**-32)
    s = encode_fixed(x) + encode_fixed(-2 * x)
    assert np.allclose(decode_fixed(s), -x, atol=2**-31)
    with pytest.raises(CryptoError):
        encode_fixed(np.array([np.inf]))


def test_masks_cancel_exactly_and_hide_each_value() -> None:
    ps = parties()
    rng = np.random.default_rng(0)
    values = {p: rng.normal(size=50).astype(np.float32) for p in ps}
    ctx = step_context(round_index=0, attempt=0, step="projection", layer=0)
    masked = {p: ps[p].mask(encode_fixed(values[p]), participants=list(ps), context=ctx) for p in ps}
    total = sum(masked.values(), np.zeros(50, np.uint64))
    assert np.allclose(decode_fixed(total), sum(v.astype(np.float64) for v in values.values()), atol=1e-8)
    for p in ps:  # a single masked vector looks nothing like the value (it spans the whole ring)
        assert not np.allclose(decode_fixed(masked[p]), values[p], atol=1.0)
    other = step_context(round_index=0, attempt=1, step="projection", layer=0)
    assert not np.array_equal(ps["p0"].mask(encode_fixed(values["p0"]), participants=list(ps), context=other),
                              masked["p0"])  # fresh masks per attempt


def test_dropped_party_is_recovered_from_the_survivors() -> None:
    ps = parties()
    ctx = step_context(round_index=3, attempt=0, step="finish", layer=-1)
    vals = {p: np.full(8, k + 1.5) for k, p in enumerate(ps)}
    got = {p: ps[p].mask(encode_fixed(vals[p]), participants=list(ps), context=ctx) for p in ("p0", "p2")}  # p1 died
    total = got["p0"] + got["p2"]
    for p in ("p0", "p2"):
        total = total - ps[p].recovery(dropped=["p1"], size=8, context=ctx)
    assert np.allclose(decode_fixed(total), vals["p0"] + vals["p2"])


def test_forged_or_substituted_keys_are_refused() -> None:
    ps = parties()
    a = ps["p1"].announce()
    evil = SecAggParty(party_id="p1", secret=b"x" * 32, run_id="run-1").announce()
    forged = type(a)(a.party_id, evil.dh_public, a.identity, a.signature)
    with pytest.raises(CryptoError):
        forged.verify("run-1")
    with pytest.raises(CryptoError):
        a.verify("another-run")  # a key is bound to its run
    with pytest.raises(CryptoError):  # a coordinator that swaps the identity key is caught by pinning
        ps["p0"].accept([ps["p0"].announce(), evil], pinned={"p1": a.identity})


def test_parties_agree_on_a_seed_the_relay_cannot_open() -> None:
    ps = parties()
    sealed = {p: ps[p].seal_contribution(7) for p in ps}
    seeds = {p: ps[p].agreed_seed(7, {v: sealed[v][p] for v in ps if v != p}) for p in ps}
    assert len(set(seeds.values())) == 1
    assert seeds["p0"] != parties(run_id="run-1")["p0"].agreed_seed(8, {v: parties()[v].seal_contribution(8)["p0"]
                                                                         for v in ("p1", "p2")})
    with pytest.raises(CryptoError):  # a box addressed to p2 does not open at p0
        ps["p0"].agreed_seed(7, {"p1": sealed["p1"]["p2"], "p2": sealed["p2"]["p0"]})
