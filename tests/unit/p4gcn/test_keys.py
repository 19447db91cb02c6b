"""Key handling of P4GCN: the rating party's private key file."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from services.errors import CryptoError
from services.p4gcn.keys import PaillierSession, load_private_key, save_private_key


@pytest.fixture(scope="module")
def keys() -> Iterator[PaillierSession]:
    """768-bit test key (never in production)."""
    session = PaillierSession.generate(768)
    yield session
    session.close()


def test_private_key_file_is_0600(keys: PaillierSession, tmp_path: os.PathLike[str]) -> None:
    sk, path = keys.private_key, os.path.join(tmp_path, "key.json")
    save_private_key(sk, path, h_s=keys.h_s)
    assert os.stat(path).st_mode & 0o777 == 0o600
    loaded, h_s = load_private_key(path)
    assert loaded == sk and h_s == keys.h_s
    os.chmod(path, 0o644)
    with pytest.raises(CryptoError):
        load_private_key(path)
