"""Access logs without raw user ids: the id segment of a user path is replaced by a short keyed hash."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets

# /v1/users/{id}... : the segment after "users" (percent-encoded as it arrived).
_USER_SEGMENT = re.compile(r"(/users/)([^/?#]+)")


class RedactUserIds(logging.Filter):
    """Rewrites uvicorn's access-log path argument; the hash key is per process, so logs of two
    processes cannot be joined on a user, while one process's lines about a user still group."""

    def __init__(self) -> None:
        super().__init__()
        self._key = secrets.token_bytes(16)

    def redact(self, path: str) -> str:
        """The path with each user id replaced by `u:<8 hex>`."""
        return _USER_SEGMENT.sub(lambda m: m.group(1) + "u:" + hashlib.blake2b(
            m.group(2).encode(), key=self._key, digest_size=4).hexdigest(), path)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], self.redact(args[2]), *args[3:])
        return True


def redact_access_log() -> None:
    """Install the filter on uvicorn's access logger once per process."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactUserIds) for f in logger.filters):
        logger.addFilter(RedactUserIds())
