"""Per-user rate limits (docs/limits.md): token buckets kept in the server process's memory.

Each principal has a bucket of requests (``rate_limit_requests_per_min``) and one of submissions
(``rate_limit_submissions_per_hour``); a caller without a valid credential is counted by its
client address (``rate_limit_anonymous_per_min``). A bucket holds one period's worth and refills
continuously, so "N per minute" allows a burst of N and then N spread over each minute. The
admin, agents (agent tokens) and nodes (node certificates) are not limited: the operator and the
cluster's own traffic, which its protocol already paces.

The buckets live in memory, per server process: a restart fills them again."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from shoal.server.settings import ServerSettings

# At most this many buckets per kind; past it, buckets that have refilled completely (idle
# callers) are dropped, so a flood of client addresses cannot grow memory without bound.
MAX_BUCKETS = 10_000
EPSILON = 1e-9
SUBMISSIONS = frozenset({("POST", "/api/v1/jobs"), ("POST", "/api/v2/jobs")})


def monotonic() -> float:
    """The buckets' clock."""
    return time.monotonic()


@dataclass
class Bucket:
    tokens: float
    updated: float


@dataclass(frozen=True)
class Refusal:
    """A request over a limit: which limit, and when one more request would be let in."""

    limit: str  # the setting's name
    option: str  # the `shoal server start` option that changes it
    per: str  # "minute" or "hour"
    count: int
    who: str
    retry_after_s: int

    def message(self) -> str:
        return (
            f"{self.who} is over the limit of {self.count} {self._what()} per {self.per}: "
            f"retry after {self.retry_after_s} s (Retry-After). The server's operator sets it "
            f"with `shoal server start {self.option} N` (0: no limit); submit sweeps as one "
            "array (`--array`) rather than one job at a time"
        )

    def _what(self) -> str:
        return "submissions" if self.limit == "rate_limit_submissions_per_hour" else "requests"


class BucketSet:
    """Buckets of ``capacity`` tokens refilled at ``capacity / period_s`` per second, by key."""

    def __init__(self, capacity: int, period_s: float, clock: Callable[[], float]) -> None:
        self.capacity = capacity
        self.rate = capacity / period_s
        self.clock = clock
        self.buckets: dict[str, Bucket] = {}

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0.0 if there was one, else the seconds until there is."""
        now = self.clock()
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_BUCKETS:
                self._drop_full(now)
            bucket = self.buckets[key] = Bucket(float(self.capacity), now)
        bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0 - EPSILON:  # 11 s + 1 s of refill is a whole token
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def _drop_full(self, now: float) -> None:
        full_after = self.capacity / self.rate
        for key in [k for k, b in self.buckets.items() if now - b.updated >= full_after]:
            del self.buckets[key]


class RateLimits:
    """The server's buckets; ``check`` answers None (let in) or the ``Refusal``."""

    def __init__(self, settings: ServerSettings, clock: Callable[[], float] | None = None):
        clock = clock or monotonic

        def buckets(count: int, period_s: float) -> BucketSet | None:
            return BucketSet(count, period_s, clock) if count > 0 else None

        self.requests = buckets(settings.rate_limit_requests_per_min, 60.0)
        self.submissions = buckets(settings.rate_limit_submissions_per_hour, 3600.0)
        self.anonymous = buckets(settings.rate_limit_anonymous_per_min, 60.0)

    @property
    def enabled(self) -> bool:
        return any(b is not None for b in (self.requests, self.submissions, self.anonymous))

    def check_user(self, user: str, method: str, path: str) -> Refusal | None:
        """Count one request of ``user`` (and one submission, if it is one)."""
        who = f"user {user}"
        if self.requests is not None:
            wait = self.requests.take(user)
            if wait:
                return _refusal("rate_limit_requests_per_min", self.requests, who, wait)
        if (method, path.rstrip("/")) in SUBMISSIONS and self.submissions is not None:
            wait = self.submissions.take(user)
            if wait:
                return _refusal("rate_limit_submissions_per_hour", self.submissions, who, wait)
        return None

    def check_anonymous(self, address: str) -> Refusal | None:
        """Count one request without a known credential from ``address``."""
        if self.anonymous is None:
            return None
        wait = self.anonymous.take(address)
        if not wait:
            return None
        who = f"client {address} (no valid credential)"
        return _refusal("rate_limit_anonymous_per_min", self.anonymous, who, wait)


OPTIONS = {
    "rate_limit_requests_per_min": ("--rate-limit-requests", "minute"),
    "rate_limit_submissions_per_hour": ("--rate-limit-submissions", "hour"),
    "rate_limit_anonymous_per_min": ("--rate-limit-anonymous", "minute"),
}


def _refusal(limit: str, buckets: BucketSet, who: str, wait_s: float) -> Refusal:
    option, per = OPTIONS[limit]
    return Refusal(limit, option, per, buckets.capacity, who, max(1, math.ceil(wait_s - EPSILON)))
