"""How often one client may call the API: windows counted in Redis (one INCR a request; a
client's window opens at its first request), so that every web process shares its count.
Rates come from DRF's `DEFAULT_THROTTLE_RATES`; when Redis cannot answer, requests pass
rather than fail.

- `enrol`: the unauthenticated enrolment endpoint, per client address.
- `api`: every authenticated request, per API token (per person for a browser's session).
- `token-guess`: failed bearer authentications per token presented (a hash of it); past it,
  that token is refused (401, as before) until the window ends without a trip to the
  database. Not per client address: everyone behind one proxy or NAT shares it, and one
  script's stale token locked them all out; guessing a 32-byte random token is hopeless
  anyway. A valid token is never counted, and a token that failed never becomes valid.
"""

import hashlib
import logging

from redis import RedisError
from rest_framework import authentication, exceptions, throttling

from portal.core import redis
from portal.tenancy.auth import ApiTokenAuthentication

log = logging.getLogger(__name__)


class WindowThrottle(throttling.SimpleRateThrottle):
    """DRF's rate syntax ("120/minute") over a window in Redis."""

    def allow_request(self, request, view):
        if self.rate is None or (key := self.get_cache_key(request, view)) is None:
            return True
        allowed, self.wait_s = hit(f"{self.scope}:{key}", self.num_requests, self.duration)
        return allowed

    def wait(self):
        return self.wait_s


def hit(key: str, limit: int, window_s: int) -> tuple[bool, float]:
    """Count one request against `key`, whose window opens at its first request: whether it
    is within `limit`, and the seconds until the window closes."""
    try:
        with redis.client().pipeline() as pipe:
            # SET NX EX then INCR (which keeps the expiry), not EXPIRE NX: Redis before 7.0,
            # such as standalone's, refuses EXPIRE NX, and every request would pass uncounted.
            pipe.set(f"wanka:throttle:{key}", 0, nx=True, ex=window_s)
            pipe.incr(f"wanka:throttle:{key}")
            pipe.ttl(f"wanka:throttle:{key}")
            _, count, ttl = pipe.execute()
    except RedisError:
        log.warning("throttle %s not counted: Redis did not answer", key)
        return True, 0.0
    return count <= limit, max(ttl, 1)


def over(key: str, limit: int) -> float:
    """The seconds until `key`'s window closes when it has already used its `limit`, else 0."""
    try:
        with redis.client().pipeline() as pipe:
            pipe.get(f"wanka:throttle:{key}")
            pipe.ttl(f"wanka:throttle:{key}")
            count, ttl = pipe.execute()
    except RedisError:
        return 0.0
    return max(ttl, 1) if int(count or 0) >= limit else 0.0


def forget(key: str) -> None:
    """Close `key`'s window (a success that clears a count of failures)."""
    try:
        redis.client().delete(f"wanka:throttle:{key}")
    except RedisError:
        log.warning("throttle %s not cleared: Redis did not answer", key)


class EnrolThrottle(WindowThrottle):
    scope = "enrol"

    def get_cache_key(self, request, view):
        return self.get_ident(request)


class ApiThrottle(WindowThrottle):
    scope = "api"

    def get_cache_key(self, request, view):
        if not request.user.is_authenticated:
            return None
        token = getattr(request.auth, "pk", None)
        return f"token:{token}" if token else f"user:{request.user.pk}"


class TokenGuesses(throttling.SimpleRateThrottle):
    scope = "token-guess"


class GuardedTokenAuthentication(ApiTokenAuthentication):
    """Bearer tokens, with each failing token counted: past the `token-guess` rate, that token
    is refused without a look in the database until the window ends; other tokens, from
    anywhere, are looked up as ever."""

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None
        guesses = TokenGuesses()
        presented = hashlib.sha256(b" ".join(parts[1:])).hexdigest()[:32]
        key = f"{guesses.scope}:{presented}"
        if over(key, guesses.num_requests):
            raise exceptions.AuthenticationFailed(
                "Invalid or revoked API token (it failed too often to be looked up again soon)."
            )
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            hit(key, guesses.num_requests, guesses.duration)
            raise
