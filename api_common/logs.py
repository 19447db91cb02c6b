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


class RedactUrls(RedactUserIds):
    """Rewrites every argument of an HTTP-client log record (httpx logs the URL it called) the same way."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(str(a)) if "/users/" in str(a) else a for a in record.args)
        record.msg = self.redact(str(record.msg)) if "/users/" in str(record.msg) else record.msg
        return True


# The HTTP clients' loggers: httpx writes one INFO line per request with the full URL, so every fan-out
# (GET /v1/users/{id}/recommendations at each party) would leave the raw user id in the log.
HTTP_CLIENT_LOGGERS = ("httpx", "httpcore", "hpack")


def redact_access_log() -> None:
    """Install the filter on uvicorn's access logger, and quiet and redact the HTTP clients', once per process."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactUserIds) for f in logger.filters):
        logger.addFilter(RedactUserIds())
    for name in HTTP_CLIENT_LOGGERS:
        client = logging.getLogger(name)
        client.setLevel(logging.WARNING)  # no per-request lines; a warning still shows, redacted
        if not any(isinstance(f, RedactUrls) for f in client.filters):
            client.addFilter(RedactUrls())
