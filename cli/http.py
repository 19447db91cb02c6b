"""The CLI's side of the error dialect: an error answer becomes the DomainError it names."""

from __future__ import annotations

from typing import Any

import httpx

from services.errors import raise_for


def checked(resp: httpx.Response) -> Any:
    """The JSON body of a successful answer ({} when empty); an error answer is raised via raise_for."""
    raise_for(resp.status_code, resp.content,
              source=f"HTTP {resp.status_code} from {resp.request.method} {resp.request.url.path}")
    return resp.json() if resp.content else {}
