"""The one credential check of both APIs: 401 without a credential, 403 with a wrong one."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.datastructures import Headers

from api_common.errors import ApiError

admin_scheme = HTTPBearer(scheme_name="AdminToken", auto_error=False, description="admin token")
api_key_scheme = APIKeyHeader(name="X-API-Key", scheme_name="ApiKey", auto_error=False)


def bearer(headers: Headers) -> str | None:
    """The token of an `Authorization: Bearer ...` header (None for another scheme or none)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def check_credential(presented: str | None, accepted: Sequence[str | None], *, what: str, header: str) -> None:
    """Refuse a missing credential (401) or one that matches none of the accepted values (403)."""
    if not presented:
        challenge = {"WWW-Authenticate": "Bearer"} if header == "Authorization" else None
        raise ApiError(401, "unauthorized", f"missing {what} ({header} header)", challenge)
    # Bytes, not str: a non-ASCII header compares like any other. Every accepted value is compared,
    # so timing reveals neither which nor how much matched.
    given = presented.encode("utf-8", "surrogateescape")
    matches = [hmac.compare_digest(given, a.encode()) for a in accepted if a]
    if not any(matches):
        raise ApiError(403, "forbidden", f"wrong {what}")
