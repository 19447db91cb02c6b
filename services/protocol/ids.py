"""The one validation of external ids (users, items) and protocol names, shared by both services.

An id is 1 to 255 characters of valid unicode without control characters or bidi overrides: the same rule on SQLite
and PostgreSQL (which refuses NUL and longer values), in JSON, CSV, NDJSON and URL paths.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

EXTERNAL_ID_MAX = 255  # the width of the id columns (services.db.party_tables)
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"  # run ids, session ids, party ids: what goes into paths and artifact names
# C0/C1 control characters (NUL and ESC included), lone surrogates (JSON "\ud800" escapes decode to
# them) and the bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), which
# make an id display as another one in a log, a terminal or a page.
_BAD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
# Text in metadata may hold tabs and line breaks, nothing else of the above.
_BAD_TEXT_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")


def _describe(char: str) -> str:
    if "\ud800" <= char <= "\udfff":
        return f"a lone surrogate (not valid unicode) U+{ord(char):04X}"
    if "\u202a" <= char <= "\u202e" or "\u2066" <= char <= "\u2069":
        return f"a bidirectional override U+{ord(char):04X}"
    return f"a control character U+{ord(char):04X}"


def text_problem(value: str) -> str | None:
    """Why a metadata string cannot be stored (control characters but tab/newline, bidi overrides), or None."""
    bad = _BAD_TEXT_CHAR.search(value)
    return None if bad is None else f"text contains {_describe(bad.group())}"


def id_problem(value: str) -> str | None:
    """Why `value` is not a valid external id, or None."""
    if not value:
        return "empty id"
    if len(value) > EXTERNAL_ID_MAX:
        return f"id longer than {EXTERNAL_ID_MAX} characters"
    bad = _BAD_CHAR.search(value)
    return None if bad is None else f"id contains {_describe(bad.group())}"


def checked_id(value: Any) -> Any:
    """Pydantic validator: refuse an invalid id (str or int) with the reason."""
    reason = id_problem(str(value))
    if reason is not None:
        raise ValueError(reason)
    return value


IdStr = Annotated[str, AfterValidator(checked_id)]
