"""N6 (npz and PSI parts): four malformed npz manifests gave 500; a zip of 400,000 empty members cost a
party +267 MB; `psi/reblind` read 200 MB before answering 409. Now every npz decoding error is a 422
naming the body, the member count is bounded before zipfile parses the directory, and the PSI routes
check the session before reading a body. Run against a real `python -m party_api` process."""

from __future__ import annotations

import io
import json
import struct
import time
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from cli.localfed import COORD_TOKEN, Proc, party_proc
from services.errors import ProtocolError
from services.protocol.federation import MAX_MEMBERS, pack_tree, unpack_tree
from tests.support.hostile import peak_rss_bytes, send_unread_body

FED = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": "1"}


def _npz(members: dict[str, bytes], *, compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=array.dtype.hasobject)
    return buf.getvalue()


def _with_manifest(manifest: str, **arrays: np.ndarray) -> bytes:
    members = {f"{k}.npy": _npy(v) for k, v in arrays.items()}
    return _npz({**members, "__manifest__.npy": _npy(np.frombuffer(manifest.encode(), np.uint8))})


def _patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


GOOD = pack_tree({"own": np.zeros(64, np.uint8), "intersection": np.zeros(32, np.uint8)})
CASES: dict[str, Callable[[], bytes]] = {
    # The manifests: nodes pack_tree never writes.
    "manifest dict node of a number": lambda: _with_manifest('{"__d__": 1}'),
    "manifest list node of a number": lambda: _with_manifest('{"__l__": 1}'),
    "manifest bare list": lambda: _with_manifest("[1, 2]"),
    "manifest array ref null": lambda: _with_manifest('{"__d__": {"own": {"__a__": null}}}'),
    "manifest array ref string": lambda: _with_manifest('{"__d__": {"own": {"__a__": "0"}}}', a0=np.zeros(3)),
    "manifest two tags": lambda: _with_manifest('{"__a__": 0, "__d__": {}}', a0=np.zeros(3)),
    "manifest NaN constant": lambda: _with_manifest('{"__d__": {"own": NaN}}'),
    "manifest nested 5,000 deep": lambda: _with_manifest('{"__l__": [' * 5000 + "1" + "]}" * 5000),
    "manifest scalar where a dict is read": lambda: _with_manifest('"own"'),
    "manifest missing": lambda: _npz({"a0.npy": _npy(np.zeros(3))}),
    "manifest not utf-8": lambda: _npz({"__manifest__.npy": _npy(np.frombuffer(b"\xff\xfe", np.uint8))}),
    # The zips.
    "not a zip": lambda: b"PK\x03\x04" + bytes(100),
    "bad local header": lambda: _patched(GOOD, 0, b"XX"),
    "truncated": lambda: GOOD[: len(GOOD) // 2],
    "truncated end record": lambda: GOOD[:-5],
    "central directory offset past the end": lambda: _patched(GOOD, len(GOOD) - 6, struct.pack("<L", 10**9)),
    "corrupt deflate stream": lambda: _patched(
        (z := _npz({"__manifest__.npy": _npy(np.zeros(4096, np.uint8))}, compression=zipfile.ZIP_DEFLATED)),
        60, b"\xff" * 40),
    "unsupported compression method": lambda: _patched(
        (z := _npz({"__manifest__.npy": b"x" * 100})), z.rfind(b"PK\x01\x02") + 10, b"\x63\x00"),
    "encrypted flag": lambda: _patched((z := _npz({"__manifest__.npy": b"x" * 100})), z.rfind(b"PK\x01\x02") + 8,
                                       b"\x01\x00"),
    # The members.
    "object array (pickle)": lambda: _with_manifest('{"__a__": 0}', a0=np.array([{}, None], dtype=object)),
    "structured dtype": lambda: _with_manifest('{"__d__": {"own": {"__a__": 0}, "intersection": {"__a__": 0}}}',
                                               a0=np.zeros(2, dtype=[("x", "<f4"), ("y", "<i4")])),
    "datetime dtype": lambda: _with_manifest('{"__d__": {"own": {"__a__": 0}, "intersection": {"__a__": 0}}}',
                                             a0=np.zeros(2, dtype="datetime64[s]")),
    "float where uint8 points are read": lambda: pack_tree({"own": np.full(64, 0.5), "intersection": "x"}),
    "nested member names": lambda: _npz({"../../etc/a0.npy": _npy(np.zeros(3)), "a/b/__manifest__.npy": b"",
                                         "__manifest__.npy": _npy(np.frombuffer(b'{"__a__": 0}', np.uint8))}),
    "member shorter than its npy header says": lambda: _with_manifest('{"__a__": 0}',
                                                                      a0=np.zeros(3))[:-200] + GOOD[-200:],
}


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("n6", tmp_path_factory.mktemp("n6")).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_npz_is_422_naming_the_body(party: Proc, case: str) -> None:
    with httpx.Client(base_url=party.url, headers=FED, timeout=30) as c:
        assert c.post("/v1/federation/runs/n6/psi/start").status_code == 200
        r = c.post("/v1/federation/runs/n6/psi/finish", content=CASES[case](),
                   headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 422, (case, r.status_code, r.text[:300])
    assert r.json()["field"] == "body"


def _many_members(n: int) -> bytes:
    return _npz({f"a{k}.npy": b"" for k in range(n)})


def test_400000_empty_members_are_refused_cheaply(party: Proc) -> None:
    assert party.popen is not None
    body = _many_members(400_000)
    before = peak_rss_bytes(party.popen.pid)
    with httpx.Client(base_url=party.url, headers=FED, timeout=60) as c:
        assert c.post("/v1/federation/runs/n6/psi/start").status_code == 200
        started = time.perf_counter()
        r = c.post("/v1/federation/runs/n6/psi/finish", content=body,
                   headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert time.perf_counter() - started < 2.0
    assert peak_rss_bytes(party.popen.pid) - before < 100 << 20  # the 39 MB body itself, not +267 MB


def test_member_count_is_bounded_before_zipfile_parses_the_directory() -> None:
    """Below zip64 (65,535 members), and with an end record that lies about the count."""
    honest = _many_members(60_000)
    lying = _patched(honest, honest.rfind(b"PK\x05\x06") + 8, struct.pack("<2H", 1, 1))
    for body in (honest, lying):
        tracemalloc.start()
        with pytest.raises(ProtocolError, match="members"):
            unpack_tree(body)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 1 << 20
    ok = {f"k{k}": np.zeros(1) for k in range(MAX_MEMBERS - 1)}  # the manifest is one more member
    assert len(unpack_tree(pack_tree(ok))) == MAX_MEMBERS - 1


def test_psi_reblind_without_a_session_is_409_before_the_body_is_read(party: Proc) -> None:
    assert party.popen is not None
    size = 200 * 1024 * 1024
    before = peak_rss_bytes(party.popen.pid)
    for path in ("/v1/federation/runs/nobody/psi/reblind", "/v1/federation/runs/nobody/psi/finish"):
        answer = send_unread_body(party.url, path, size=size, headers=FED)
        assert answer.status == 409 and "no PSI in progress" in str(answer.body["detail"]), answer.body
        assert answer.bytes_sent < size // 4
        assert answer.seconds_to_answer < 2.0
    assert peak_rss_bytes(party.popen.pid) - before < 50 << 20
    assert httpx.get(f"{party.url}/health", timeout=5).status_code == 200


def test_real_trees_still_decode() -> None:
    tree = {"a": np.arange(5), "b": [np.zeros((2, 3), np.float32), "x", None, 1.5, True], "c": {},
            "s": np.array(["u1", "u2"])}
    out = unpack_tree(pack_tree(tree))
    assert out["b"][1:] == ["x", None, 1.5, True] and out["c"] == {} and out["s"].tolist() == ["u1", "u2"]
    assert json.dumps(out["b"][1:])
