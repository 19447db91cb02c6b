"""The one validation of external ids (users, items) and protocol names, shared by both services.

An id is 1 to 255 characters of valid unicode without control characters: the same rule on SQLite
and PostgreSQL (which refuses NUL and longer values), in JSON, CSV, NDJSON and URL paths.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

EXTERNAL_ID_MAX = 255  # the width of the id columns (services.db.party_tables)
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"  # run ids, session ids, party ids: what goes into paths and artifact names
# C0/C1 control characters (NUL included) and lone surrogates (JSON "\ud800" escapes decode to them).
_BAD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def id_problem(value: str) -> str | None:
    """Why `value` is not a valid external id, or None."""
    if not value:
        return "empty id"
    if len(value) > EXTERNAL_ID_MAX:
        return f"id longer than {EXTERNAL_ID_MAX} characters"
    bad = _BAD_CHAR.search(value)
    if bad is not None:
        char = bad.group()
        what = "a lone surrogate (not valid unicode)" if "\ud800" <= char <= "\udfff" else "a control character"
        return f"id contains {what} U+{ord(char):04X}"
    return None


def checked_id(value: Any) -> Any:
    """Pydantic validator: refuse an invalid id (str or int) with the reason."""
    reason = id_problem(str(value))
    if reason is not None:
        raise ValueError(reason)
    return value


IdStr = Annotated[str, AfterValidator(checked_id)]
