"""F12: federation binary bodies are bounded before and after decompression, npy headers are checked
against their data before anything is allocated, and PSI sessions are bounded in number and expire."""

from __future__ import annotations

import io
import time
import tracemalloc
import zipfile

import httpx
import numpy as np
import pytest

from services.errors import ProtocolError
from services.party import federation as fed_module
from services.protocol.arrays import decode_array
from services.protocol.federation import pack_tree, unpack_tree
from tests.support.party import COORDINATOR, Party

FED = {"Authorization": f"Bearer {COORDINATOR}", "X-Fedrec-Protocol": "1", "Content-Type": "application/octet-stream"}


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _bomb(gib: float = 1.0) -> bytes:
    """A ~1 MB npz whose one member inflates to a `gib` GiB float32 array (written in chunks)."""
    n = int(gib * (1 << 30)) // 4
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("own.npy", "w", force_zip64=True) as member:
            member.write(_npy_header((n,)))
            zeros = bytes(4 << 20)
            for _ in range(n * 4 // len(zeros)):
                member.write(zeros)
        archive.writestr("__manifest__.npy", _npy_header((0,), "|u1"))
    return buf.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb()


def test_npz_bomb_is_refused_before_decompression(bomb: bytes) -> None:
    assert len(bomb) < 2 << 20
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match="declare"):
        unpack_tree(bomb)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 << 20 and time.perf_counter() - started < 1.0


def test_npy_header_with_a_huge_shape_is_refused_unallocated() -> None:
    data = _npy_header((10**12,)) + bytes(16)
    tracemalloc.start()
    with pytest.raises(ProtocolError, match="declares shape"):
        decode_array(data, dtype=np.float32)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(ProtocolError):  # the same header inside an npz
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as archive:
            archive.writestr("x.npy", data)
        unpack_tree(buf.getvalue())
    assert np.array_equal(unpack_tree(pack_tree({"a": np.arange(5)}))["a"], np.arange(5))  # real trees still decode


def test_bomb_and_huge_shape_over_http_get_4xx(party: Party, bomb: bytes) -> None:
    with httpx.Client(base_url=party.url, headers=FED, timeout=60) as c:
        assert c.post("/v1/federation/runs/r1/psi/start").status_code == 200
        r = c.post("/v1/federation/runs/r1/psi/finish", content=bomb)
        assert r.status_code == 422 and r.json()["field"] == "body", r.text
        huge = io.BytesIO()
        with zipfile.ZipFile(huge, "w") as archive:
            archive.writestr("own.npy", _npy_header((1 << 40,), "|u1") + bytes(32))
        r = c.post("/v1/federation/runs/r1/psi/finish", content=huge.getvalue())
        assert r.status_code == 422, r.text


def test_psi_sessions_are_bounded_and_expire(party: Party, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every psi/start kept a session (11.6 MB each at 73k users) forever."""
    with httpx.Client(base_url=party.url, headers=FED, timeout=60) as c:
        for k in range(fed_module.MAX_PSI + 5):
            assert c.post(f"/v1/federation/runs/r{k}/psi/start").status_code == 200
        oldest = c.post("/v1/federation/runs/r0/psi/reblind", content=bytes(32))
        assert oldest.status_code == 409 and "no PSI in progress" in oldest.json()["detail"]
        newest = c.post(f"/v1/federation/runs/r{fed_module.MAX_PSI + 4}/psi/reblind", content=bytes(32))
        assert newest.status_code != 409 or "no PSI" not in newest.text
        monkeypatch.setattr(fed_module, "PSI_TTL_S", 0.0)
        time.sleep(0.01)
        expired = c.post(f"/v1/federation/runs/r{fed_module.MAX_PSI + 4}/psi/reblind", content=bytes(32))
        assert expired.status_code == 409 and "no PSI in progress" in expired.json()["detail"]
