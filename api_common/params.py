"""Path parameters shared by both APIs: ids and names validated once (services.protocol.ids) before a handler runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from services.protocol.ids import NAME_PATTERN, IdStr

# A user or item id in a path: 1-255 characters, valid unicode, no control characters (422 naming it).
IdPath = Annotated[IdStr, Path(description="external id: 1-255 characters, no control characters")]
# A run, session or party name in a path: letters, digits, '_', '.', '-' (at most 64).
NamePath = Annotated[str, Path(pattern=NAME_PATTERN, description="name: [A-Za-z0-9_.-]{1,64}")]
# Round and layer indexes in federation paths (bounded: they end up in 32-bit version columns).
RoundPath = Annotated[int, Path(ge=0, le=1_000_000)]
LayerPath = Annotated[int, Path(ge=0, le=64)]
