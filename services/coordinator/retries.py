"""How the coordinator retries a party: tenacity's jittered exponential backoff, a party's Retry-After honoured.

Transient faults (connection errors, timeouts, 5xx answers) are retried; a 4xx is final. A 503 or
429 that carries Retry-After (the party's forwarder sends it while its federation process restarts)
is waited for as asked, capped, plus jitter so parties' retries do not arrive in step. The client is
synchronous and runs on the runner's and fan-out's worker threads, so the wait sleeps that thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random,
    wait_random_exponential,
)

T = TypeVar("T")
RETRY_AFTER_CAP_S = 30.0  # a party's Retry-After is honoured up to this: every wait has a deadline


class TransientAnswer(Exception):
    """A party answered 5xx: worth another attempt (the answer is kept for its Retry-After)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}: {response.text[:200]}")
        self.response = response


def retry_after_s(response: httpx.Response, *, now: float | None = None) -> float | None:
    """Seconds an answer's Retry-After asks for (delta-seconds or an HTTP date); None if absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


class PartyWait:
    """tenacity wait: the party's Retry-After (capped) plus up to `backoff_s` of jitter when it sent one, else
    full-jitter exponential backoff (uniform in [0, backoff_s · 2^(attempt−1)], at most the cap)."""

    def __init__(self, backoff_s: float, cap_s: float = RETRY_AFTER_CAP_S) -> None:
        self.cap_s = cap_s
        self.backoff = wait_random_exponential(multiplier=backoff_s, max=cap_s)
        self.jitter = wait_random(0, backoff_s)

    def __call__(self, state: RetryCallState) -> float:
        """Seconds to wait before the next attempt."""
        failure = None if state.outcome is None else state.outcome.exception()
        asked = retry_after_s(failure.response) if isinstance(failure, TransientAnswer) else None
        if asked is None:
            return float(self.backoff(state))
        return min(asked, self.cap_s) + float(self.jitter(state))


def with_retries(attempt: Callable[[], T], *, max_retries: int, backoff_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """`attempt()` until it returns, at most `max_retries` more times after a transport error or TransientAnswer
    (the last one re-raised)."""
    retrying = Retrying(stop=stop_after_attempt(max_retries + 1), wait=PartyWait(backoff_s),
                        retry=retry_if_exception_type((httpx.TransportError, TransientAnswer)), reraise=True,
                        sleep=sleep)
    return retrying(attempt)
