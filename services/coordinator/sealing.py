"""Party credentials are kept sealed in the coordinator's database (XSalsa20-Poly1305, libsodium SecretBox).

The key comes from COORD_CREDENTIAL_KEY, or from a key file the coordinator creates owner-only beside its
SQLite database (or in its data folder): a copy of the database alone no longer opens any party.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

from nacl.exceptions import CryptoError as NaclCryptoError
from nacl.secret import SecretBox
from sqlalchemy.engine import make_url

from services.config import CoordinatorSettings
from services.db.session import owner_only_file
from services.errors import CryptoError

PREFIX = "sealed:v1:"


class Sealer:
    """Seal and open credential strings with one key; values without the prefix are legacy plaintext."""

    def __init__(self, key: bytes) -> None:
        self._box = SecretBox(key)

    def seal(self, token: str) -> str:
        """The stored form of a credential."""
        return PREFIX + base64.urlsafe_b64encode(self._box.encrypt(token.encode())).decode()

    def open(self, stored: str) -> str:
        """The credential behind a stored value (a legacy plaintext value is returned as it is)."""
        if not stored.startswith(PREFIX):
            return stored
        try:
            return self._box.decrypt(base64.urlsafe_b64decode(stored[len(PREFIX):])).decode()
        except (NaclCryptoError, ValueError) as exc:
            raise CryptoError("a stored party credential does not open with this coordinator's key") from exc

    @staticmethod
    def is_sealed(stored: str) -> bool:
        """Whether a stored value is sealed."""
        return stored.startswith(PREFIX)


def key_file(settings: CoordinatorSettings) -> Path:
    """Where the generated key lives: beside a SQLite database, else in the data folder."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database + ".key")
    return settings.data_dir / "credential.key"


def sealer_for(settings: CoordinatorSettings) -> Sealer:
    """The coordinator's sealer: COORD_CREDENTIAL_KEY, or the key file (created owner-only on first use)."""
    if settings.credential_key:
        return Sealer(base64.urlsafe_b64decode(settings.credential_key))
    path = key_file(settings)
    if not path.exists() or path.stat().st_size == 0:
        owner_only_file(path)
        path.write_text(base64.urlsafe_b64encode(secrets.token_bytes(SecretBox.KEY_SIZE)).decode())
    return Sealer(base64.urlsafe_b64decode(path.read_text().strip()))
