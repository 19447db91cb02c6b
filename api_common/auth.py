"""The one credential check of both APIs: 401 without a credential, 403 with a wrong one."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from fastapi.security import APIKeyHeader, HTTPBearer

from api_common.errors import ApiError

admin_scheme = HTTPBearer(scheme_name="AdminToken", auto_error=False, description="admin token")
api_key_scheme = APIKeyHeader(name="X-API-Key", scheme_name="ApiKey", auto_error=False)


def check_credential(presented: str | None, accepted: Sequence[str | None], *, what: str, header: str) -> None:
    """Refuse a missing credential (401) or one that matches none of the accepted values (403)."""
    if not presented:
        challenge = {"WWW-Authenticate": "Bearer"} if header == "Authorization" else None
        raise ApiError(401, "unauthorized", f"missing {what} ({header} header)", challenge)
    # Compare against every accepted value so timing reveals neither which nor how much matched.
    matches = [hmac.compare_digest(presented.encode(), a.encode()) for a in accepted if a]
    if not any(matches):
        raise ApiError(403, "forbidden", f"wrong {what}")
